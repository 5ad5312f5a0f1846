from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "example_project.tenants"
    label = "tenants"
    default_auto_field = "django.db.models.BigAutoField"
