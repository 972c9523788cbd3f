"""The dashboard as an entry of the admin's model lists (its index and navigation sidebar):
a proxy of Job with no table and no permissions of its own (viewing jobs shows it)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0031_held_before_insert"),
    ]

    operations = [
        migrations.CreateModel(
            name="Dashboard",
            fields=[],
            options={
                "verbose_name": "dashboard",
                "verbose_name_plural": "dashboard",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("django_pqjobs.job",),
        ),
    ]
