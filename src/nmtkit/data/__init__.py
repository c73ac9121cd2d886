"""nmtkit.data"""
