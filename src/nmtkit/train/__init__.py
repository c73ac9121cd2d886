"""nmtkit.train"""
