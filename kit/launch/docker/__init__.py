"""Engines in containers: the container spec, the Docker launcher and provider, `--launcher docker`, the kit's images (`kit images`) and what `kit doctor` says of them."""
