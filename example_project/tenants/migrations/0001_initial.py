from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="JobRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("message_id", models.BigIntegerField(db_index=True)),
                ("tenant", models.CharField(db_index=True, max_length=200)),
                ("seconds", models.FloatField(help_text="Simulated work, from the payload.")),
                ("attempt", models.IntegerField()),
                ("worker_pid", models.IntegerField()),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField()),
            ],
            options={
                "ordering": ["finished_at"],
            },
        ),
    ]
