"""Live worker concurrency: ``pqjobs_concurrency`` (``capacity.py``), and its audit action."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_pqjobs', '0020_unique_jobs'),
    ]

    operations = [
        migrations.AlterField(
            model_name='operatoraction',
            name='action',
            field=models.CharField(choices=[('retry', 'Retry'), ('cancel', 'Cancel'), ('run_now', 'Run now'), ('release', 'Release'), ('delete', 'Delete'), ('pause', 'Pause'), ('resume', 'Resume'), ('schedule_enable', 'Enable schedule'), ('schedule_disable', 'Disable schedule'), ('schedule_run_now', 'Run schedule now'), ('concurrency', 'Set worker concurrency')], max_length=32),
        ),
        migrations.CreateModel(
            name='ConcurrencySetting',
            fields=[
                ('name', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('concurrency', models.PositiveIntegerField()),
                ('set_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('set_by', models.CharField(blank=True, db_default='', default='', max_length=150)),
            ],
            options={
                'verbose_name': 'worker concurrency',
                'verbose_name_plural': 'worker concurrency',
                'db_table': 'pqjobs_concurrency',
                'ordering': ['name'],
                'constraints': [models.CheckConstraint(condition=models.Q(('concurrency__gte', 1)), name='pqjobs_concurrency_positive')],
            },
        ),
    ]
