"""rill.optim"""
