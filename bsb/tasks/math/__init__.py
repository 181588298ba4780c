"""The math domain: the ``math`` task, its grader and the ``bsb data`` report."""
