"""report layer of bisect_ov."""
