"""The goodput simulator behind `jobmedic simulate` and `bench/goodput.py` (`engine` is the spec)."""
