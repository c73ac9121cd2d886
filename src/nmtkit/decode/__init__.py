"""nmtkit.decode"""
