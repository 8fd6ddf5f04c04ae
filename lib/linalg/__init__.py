"""rill.linalg: the Array API standard's linear-algebra extension."""
