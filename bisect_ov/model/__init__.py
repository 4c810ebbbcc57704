"""model layer of bisect_ov."""
