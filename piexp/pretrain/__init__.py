"""`model=learner-local`: a small Qwen3 that piexp pre-trains itself, offline, from its own
episodes, so that `service=local` has a base model that can learn on a CPU.

The base model imitates a mixture of scripted policies (see `recipe.py`): it has learnt
by gradient descent to read a workspace, write a family's program, run it and state what
it printed, but also, as often, to write a program that prints a wrong number or one that
crashes. Which behaviour pays is for RL to find out. `ensure_learner_model` builds the
model once per recipe and source digest into piexp's cache (`data.py` rolls the episodes
out through the real renderer, tools and sandbox; `training.py` fits the model, in a
child process that `fit_process.py` runs) and returns its folder.
"""

from piexp.pretrain.build import LEARNER_MODEL_NAME, ensure_learner_model, learner_model_dir

__all__ = ["LEARNER_MODEL_NAME", "ensure_learner_model", "learner_model_dir"]
