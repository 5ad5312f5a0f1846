from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobrun",
            name="queue",
            field=models.CharField(default="transcode", max_length=100),
        ),
    ]
