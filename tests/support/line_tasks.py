"""A task whose verifier reads an answer the embedded arithmetic model never writes: the arithmetic problems graded
on an ``Answer:`` line (the model writes ``\\boxed{}``), so every response holds no answer the task can read."""

from bsb.tasks.synthetic.arith import ArithTask


class AnswerLineArith(ArithTask):
    name = "arith_answer_line"

    def __init__(self, **options):
        super().__init__(**options)
        self.convention = "answer_line"

    def make(self, rng, n_ops, pid):
        p = super().make(rng, n_ops, pid)
        return type(p)(p.id, p.prompt, p.answer, {**p.meta, "convention": "answer_line"})
