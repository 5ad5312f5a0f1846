"""Plans, named sets of limits (``lonnymq_plan``, ``lonnymq_queue_plan``, the channel's
``plan_id`` and ``own_*`` columns, ``lonnymq_configure_plan_v1``,
``lonnymq_configure_channel_v4``, the trigger giving new channels their queue's default plan);
from sql/migrations/0026_plans.{up,down}.sql. Nothing is replaced: the reverse drops what
this one added.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0025_dedup_modes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0026_plans"),
                    reverse_sql=sql.migration("0026_plans", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="Plan",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=100, unique=True)),
                        (
                            "weight",
                            models.IntegerField(
                                default=1, help_text="Messages released per round under backlog (1 to 1000)."
                            ),
                        ),
                        (
                            "max_concurrency",
                            models.IntegerField(
                                blank=True,
                                null=True,
                                help_text="Most messages of a channel in flight at once; empty: unlimited.",
                            ),
                        ),
                        (
                            "release_interval_ms",
                            models.BigIntegerField(
                                default=0,
                                help_text="Least time between two releases of a channel, in milliseconds (0: none).",
                            ),
                        ),
                        ("rate_count", models.IntegerField(blank=True, null=True)),
                        ("rate_period_ms", models.BigIntegerField(blank=True, null=True)),
                        ("rate_burst", models.IntegerField(blank=True, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(default=django.utils.timezone.now, editable=False),
                        ),
                        (
                            "updated_at",
                            models.DateTimeField(default=django.utils.timezone.now, editable=False),
                        ),
                    ],
                    options={
                        "db_table": "lonnymq_plan",
                        "ordering": ["name"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("name__regex", "^.{1,100}$")),
                                name="lonnymq_plan_name_length",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("name__regex", "\\S")), name="lonnymq_plan_name_not_blank"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("weight__gte", 1), ("weight__lte", 1000)),
                                name="lonnymq_plan_weight_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("max_concurrency__isnull", True),
                                    ("max_concurrency__gt", 0),
                                    _connector="OR",
                                ),
                                name="lonnymq_plan_max_concurrency_positive",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("release_interval_ms__gte", 0), ("release_interval_ms__lte", 31622400000)
                                ),
                                name="lonnymq_plan_release_interval_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(
                                        ("rate_burst__isnull", True),
                                        ("rate_count__isnull", True),
                                        ("rate_period_ms__isnull", True),
                                    ),
                                    models.Q(
                                        ("rate_burst__isnull", False),
                                        ("rate_count__isnull", False),
                                        ("rate_period_ms__isnull", False),
                                    ),
                                    _connector="OR",
                                ),
                                name="lonnymq_plan_rate_complete",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("rate_count__gte", 1), ("rate_count__lte", 1000000)),
                                name="lonnymq_plan_rate_count_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("rate_period_ms__gte", 1), ("rate_period_ms__lte", 31622400000)
                                ),
                                name="lonnymq_plan_rate_period_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("rate_burst__gte", 1), ("rate_burst__lte", 1000000)),
                                name="lonnymq_plan_rate_burst_range",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="QueuePlan",
                    fields=[
                        ("queue", models.CharField(max_length=100, primary_key=True, serialize=False)),
                        (
                            "updated_at",
                            models.DateTimeField(default=django.utils.timezone.now, editable=False),
                        ),
                        (
                            "plan",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="default_of",
                                to="django_lonnymq.plan",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "queue default plan",
                        "db_table": "lonnymq_queue_plan",
                        "ordering": ["queue"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("queue__regex", "^.{1,100}$")),
                                name="lonnymq_queue_plan_queue_length",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("queue__regex", "\\S")),
                                name="lonnymq_queue_plan_queue_not_blank",
                            ),
                        ],
                    },
                ),
                migrations.AddField(
                    model_name="channel",
                    name="plan",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="channels",
                        to="django_lonnymq.plan",
                    ),
                ),
                migrations.AddField(
                    model_name="channel", name="own_weight", field=models.BooleanField(default=False)
                ),
                migrations.AddField(
                    model_name="channel", name="own_max_concurrency", field=models.BooleanField(default=False)
                ),
                migrations.AddField(
                    model_name="channel",
                    name="own_release_interval",
                    field=models.BooleanField(default=False),
                ),
                migrations.AddField(
                    model_name="channel", name="own_rate", field=models.BooleanField(default=False)
                ),
                migrations.AddIndex(
                    model_name="channel",
                    index=models.Index(
                        condition=models.Q(("plan__isnull", False)),
                        fields=["plan", "id"],
                        name="lonnymq_channel_plan_idx",
                    ),
                ),
            ],
        ),
    ]
