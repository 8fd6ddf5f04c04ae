"""rill.train"""
