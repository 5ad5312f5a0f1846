"""Topics with consumer groups: lonnymq_subscription, lonnymq_unrouted and the publish
function, from sql/migrations/0009_topics.{up,down}.sql (see django_lonnymq/topics.py).
"""

import django.utils.timezone
from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0008_workers"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0009_topics"),
                    reverse_sql=sql.migration("0009_topics", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="Subscription",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        (
                            "topic",
                            models.CharField(
                                help_text="The topic name events are published to.", max_length=200
                            ),
                        ),
                        (
                            "queue",
                            models.CharField(
                                help_text="The queue (consumer group) that gets its own message for each event.",
                                max_length=100,
                            ),
                        ),
                        (
                            "created_at",
                            models.DateTimeField(default=django.utils.timezone.now, editable=False),
                        ),
                    ],
                    options={
                        "db_table": "lonnymq_subscription",
                        "ordering": ["topic", "queue"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("topic", "queue"), name="lonnymq_subscription_topic_queue_uniq"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("topic__regex", "^.{1,200}$")),
                                name="lonnymq_subscription_topic_length",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("topic__regex", "\\S")),
                                name="lonnymq_subscription_topic_not_blank",
                                violation_error_message="Topic must not be only blanks.",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("queue__regex", "^.{1,100}$")),
                                name="lonnymq_subscription_queue_length",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("queue__regex", "\\S")),
                                name="lonnymq_subscription_queue_not_blank",
                                violation_error_message="Queue must not be only blanks.",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Unrouted",
                    fields=[
                        ("topic", models.CharField(max_length=200, primary_key=True, serialize=False)),
                        ("events", models.BigIntegerField(default=0)),
                        ("last_published_at", models.DateTimeField(default=django.utils.timezone.now)),
                    ],
                    options={
                        "verbose_name": "unrouted topic",
                        "db_table": "lonnymq_unrouted",
                        "ordering": ["topic"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("topic__regex", "^.{1,200}$")),
                                name="lonnymq_unrouted_topic_length",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("events__gte", 0)),
                                name="lonnymq_unrouted_events_nonnegative",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
