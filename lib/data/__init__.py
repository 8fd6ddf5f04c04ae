"""rill.data"""
