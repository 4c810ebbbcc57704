"""analysis layer of bisect_ov."""
