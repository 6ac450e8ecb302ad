"""Integrations with training frameworks' own data code: each module plugs
fastdecode's datasets into one framework (``fastdecode.integrations.timm``)."""
