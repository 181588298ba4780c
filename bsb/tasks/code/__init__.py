"""The code domain: the ``code`` task, DeepCoder / LiveCodeBench loaders and the sandbox that runs model-written
programs."""
