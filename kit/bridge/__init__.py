"""The only package that imports verl, ray or sglang: adapters between the kit and VERL 0.9.x."""
