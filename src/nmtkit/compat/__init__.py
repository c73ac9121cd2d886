"""nmtkit.compat"""
