"""The comparison's no-op handler for django-lonnymq.

Imported by the worker's handler autodiscovery, before the worker connects and starts its
loop: that is where drain runs hold every worker at the start line (recorder.barrier).
"""

from bench.compare import recorder
from django_lonnymq import Message, handler


@handler("bench_noop")
def bench_noop(message: Message) -> None:
    recorder.hit(message.payload)


recorder.barrier()
