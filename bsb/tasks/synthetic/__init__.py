"""Synthetic tasks: generators and tasks of the embedded defaults (``walk``, ``arith``, and the code recipes)."""
