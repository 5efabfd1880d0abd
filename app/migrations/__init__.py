"""The route registry's Alembic migrations, shipped inside the package.

Alembic finds them as the resource ``app:migrations`` (``script_location`` in alembic.ini and in
:func:`app.routing.schema.alembic_config`), so an installed broker creates and upgrades its database
without the source checkout.
"""
