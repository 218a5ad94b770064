"""Drop-in storage backends for the real agent frameworks, one module each.

``lovia_store.integrations.lovia`` (extra ``lovia-store[lovia]``) and
``lovia_store.integrations.zett`` (extra ``lovia-store[zett]``) take and return
the framework's own objects and store them in lovia-store's tables. Nothing
here imports a framework until its module is imported.
"""
