"""App config: registers the system checks, the workers' duties (the periodic schedules' ticks)
and observers (the spans); eager mode turned on in the settings starts watching ``atomic()``
blocks before any opens (:func:`django_lonnymq.eager.watch_block_exits`)."""

from django.apps import AppConfig


class LonnyMQConfig(AppConfig):
    name = "django_lonnymq"
    label = "django_lonnymq"
    verbose_name = "Message queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.signals import setting_changed
        from django.db.models.signals import pre_save

        from . import (
            checks,  # noqa: F401  (registers the checks)
            durable,
            eager,
            schedules,
            workflows,
        )
        from .conf import settings
        from .tracing.worker import TracingObserver
        from .worker import duties

        duties.register("schedules", schedules.worker_duty)
        duties.register_observer("tracing", TracingObserver)
        duties.register("durable", durable.worker_duty)
        eager.register_workflow_runner(workflows.run_eagerly)
        # A schedule created with the ORM (a shell, a fixture, a data migration) gets its first tick.
        pre_save.connect(schedules.first_tick_on_insert, dispatch_uid="django_lonnymq.schedule_first_tick")

        if settings.EAGER:
            eager.watch_block_exits()
        setting_changed.connect(eager.watch_when_turned_on, dispatch_uid="lonnymq_eager_watch")
