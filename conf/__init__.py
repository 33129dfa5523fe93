# Makes conf/ the package ``ltrjax.conf`` of an installed ltrjax (setup.py); its YAML files are package data.
