"""The relay's Celery settings as a configuration module, read from the ``RELAY_*`` variables.

``celery -A relay`` builds the same settings itself (so it also works from an installed wheel);
this module is for deployments that configure an app from a module, e.g.
``app.config_from_object("celeryconfig")``, or that copy it to add their own options.
"""

from relay.celery import celery_config
from relay.config import Settings

globals().update(celery_config(Settings.from_env()))
