"""The old address of the worker listing, kept so existing imports work: the rows and their
listing live with their model in :mod:`django_lonnymq.models.worker`."""

from .models.worker import STATES, check_name, listing, serving, with_state

__all__ = ["STATES", "check_name", "listing", "serving", "with_state"]
