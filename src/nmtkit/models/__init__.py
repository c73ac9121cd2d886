"""nmtkit.models"""
