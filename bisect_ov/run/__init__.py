"""run layer of bisect_ov."""
