"""learner-local's pre-training: the cache key follows what the fit consumes (recipe,
tokenizer, the episodes' tokens, the fit's code) and not edits that leave those as they
were, a build is made once and reused, and the fit learns the data while pushing the
rest of the vocabulary down (the property whose absence made sampled text wander off)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from piexp.pretrain import build
from piexp.pretrain.data import TokenSequence, answer_turns, answer_windows
from piexp.pretrain.fit_process import FitData, data_digest
from piexp.pretrain.recipe import LearnerRecipe, code_behaviour_digest, content_key, inputs_digest, source_digest

TINY = dataclasses.replace(
    LearnerRecipe(),
    tasks_per_family=4,
    copy_tasks_per_family=3,
    steps=2,
    whole_turns_from_step=1,  # both phases of the copy fit run
    batch_sequences=2,
    sampled_negatives=64,
    exact_positions=4,
)


def test_inputs_digest_follows_recipe_data_config_and_sources(tmp_path: Path) -> None:
    """The memo's key: any source byte that might shape the episodes sends the build to
    roll them out again (which then finds whether their tokens changed)."""
    root = tmp_path / "piexp"
    for package in ("env", "policies", "tasks", "tokenizer", "pretrain", "sandbox"):
        (root / package).mkdir(parents=True)
        (root / package / "a.py").write_text("x = 1\n")
    for module in ("languages.py", "cookbook_compat.py"):
        (root / module).write_text("y = 2\n")
    recipe = LearnerRecipe()
    first = inputs_digest(recipe, root, {"families": ["json_tree"]})
    assert first == inputs_digest(recipe, root, {"families": ["json_tree"]})
    assert first != inputs_digest(
        dataclasses.replace(recipe, steps=recipe.steps + 1), root, {"families": ["json_tree"]}
    )
    assert first != inputs_digest(recipe, root, {"families": ["csv_agg"]})
    before = source_digest(root)
    (root / "tasks" / "a.py").write_text("x = 3\n")  # a reference program or a prompt changed
    assert source_digest(root) != before
    assert first != inputs_digest(recipe, root, {"families": ["json_tree"]})


def _data(token: int = 7) -> FitData:
    sequence = TokenSequence("oracle", 1.0, 0, [1, 2, token], [2, token, 9], [0.0, 1.0, 1.0], family="json_tree")
    return FitData([sequence], [sequence], [], [sequence], [sequence])


def test_content_key_follows_the_data_and_the_fits_behaviour_not_its_comments(tmp_path: Path) -> None:
    """The build folder's name: one episode token, weight, policy or part of the data
    changed is another model; the fit's code with a comment or docstring edited is the
    same fit, while a changed statement is not."""
    recipe = LearnerRecipe()
    data = data_digest(_data())
    key = content_key(recipe, "tok", data, "fit")
    assert key == content_key(recipe, "tok", data_digest(_data()), "fit")
    assert key != content_key(recipe, "tok", data_digest(_data(token=8)), "fit")
    moved = _data()
    assert data_digest(dataclasses.replace(moved, copies=[moved.train[0]])) != data
    reweighted = dataclasses.replace(moved.train[0], weights=[0.0, 0.0, 1.0])
    assert data_digest(dataclasses.replace(moved, train=[reweighted])) != data
    relabelled = dataclasses.replace(moved.train[0], policy="crash")
    assert data_digest(dataclasses.replace(moved, train=[relabelled])) != data
    assert key != content_key(recipe, "other tokenizer", data, "fit")
    assert key != content_key(recipe, "tok", data, "other fit")
    assert key != content_key(dataclasses.replace(recipe, steps=recipe.steps + 1), "tok", data, "fit")
    module = tmp_path / "training.py"
    module.write_text('"""Fit."""\n\ndef step(x):\n    return x + 1\n')
    before = code_behaviour_digest([module])
    module.write_text('"""Fit, reworded."""\n\n\ndef step(x):  # why\n    """One step."""\n    return x + 1\n')
    assert code_behaviour_digest([module]) == before
    module.write_text('"""Fit."""\n\ndef step(x):\n    return x + 2\n')
    assert code_behaviour_digest([module]) != before


def _pattern(count: int, offset: int) -> list[TokenSequence]:
    """Sequences of a fixed phrase (ids 1000..1011) after a varying prefix."""
    phrase = list(range(1000, 1012))
    sequences = []
    for i in range(count):
        tokens = [2000 + (i + offset) % 7, *phrase]
        sequences.append(
            TokenSequence(
                policy="p",
                reward=1.0,
                episode=i,
                tokens=tokens[:-1],
                targets=tokens[1:],
                weights=[0.0] + [1.0] * (len(tokens) - 2),
            )
        )
    return sequences


@pytest.mark.parametrize("exact_positions", [16, 0])
def test_fit_learns_the_data_and_pushes_the_rest_of_the_vocabulary_down(exact_positions: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from piexp.pretrain.training import evaluate, fit

    recipe = dataclasses.replace(
        LearnerRecipe(),
        steps=60,
        batch_sequences=4,
        sampled_negatives=256,
        exact_positions=exact_positions,
        learning_rate=1e-2,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**recipe.architecture), dtype=torch.float32)
    train, heldout = _pattern(16, 0), _pattern(4, 3)
    before, _ = evaluate(model, heldout)
    report = fit(model, train, heldout, recipe)
    # Exact-softmax NLL per target token: from ~ln(151,936) = 11.9 to a small fraction.
    assert before > 10
    with torch.no_grad():
        tokens = torch.tensor(heldout[0].tokens)
        probs = torch.softmax(model(input_ids=tokens[None]).logits[0, 1:], dim=-1)
        data_ids = sorted({t for s in train for t in (*s.tokens, *s.targets)})
        outside = 1 - probs[:, data_ids].sum(-1)  # mass on tokens the data never has
    if exact_positions:
        assert report.heldout_nll < 0.5 and report.heldout_token_accuracy == 1.0
        assert float(outside.max()) < 0.05
    else:
        # The sampled softmax alone learns the order of the data's tokens but leaves
        # much of the probability on the rest of the vocabulary.
        assert float(outside.max()) > 0.2


def _branching(count: int, offset: int) -> list[TokenSequence]:
    """Two behaviours that part at one token (1100 in a third of the sequences, 1200 in
    the rest) after a shared prompt, as the oracle's and crash's first turns do."""
    sequences = []
    for i in range(count):
        policy = "oracle" if i % 3 == 0 else "crash"
        action = [1100, 1101, 1102, 1103] if policy == "oracle" else [1200, 1201, 1202, 1203]
        tokens = [2000 + (i + offset) % 7, 1000, 1001, 1002, *action]
        weights = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]  # the action, from its first token
        sequences.append(TokenSequence(policy, 1.0, i, tokens[:-1], tokens[1:], weights, family="f"))
    return sequences


def test_where_behaviours_part_the_fit_ends_at_their_share_of_the_data() -> None:
    """Batches drawn at random pushed the token where two behaviours part toward whichever
    one each batch held more of, and the fit ended wherever its last steps left it (the
    base model's oracle share came out 0.14 to 0.33 where the data held a third)."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from piexp.pretrain.training import _spread_by_behaviour, fit

    behaviours = [(family, s.policy) for family in ("f", "g") for s in _branching(15, 0)]
    order = _spread_by_behaviour(behaviours, random.Random(0))[::-1]
    assert sorted(order) == list(range(30))
    for start in range(0, 30, 6):  # with two families, every two batches of three
        window = [behaviours[i] for i in order[start : start + 6]]
        assert all(window.count((family, "oracle")) == 1 for family in ("f", "g")), window
    shares = []
    for seed in (0, 1, 2):
        recipe = dataclasses.replace(
            LearnerRecipe(), steps=60, batch_sequences=3, sampled_negatives=256, exact_positions=0,
            learning_rate=1e-2, seed=seed,
        )  # fmt: skip
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(Qwen3Config(**recipe.model_config()), dtype=torch.float32)
        fit(model, _branching(30, 0), _branching(3, 5), recipe)
        with torch.no_grad():
            prompt = torch.tensor(_branching(1, 5)[0].tokens[:4])
            probs = torch.softmax(model(input_ids=prompt[None]).logits[0, -1], dim=-1)
        shares.append(float(probs[1100] / (probs[1100] + probs[1200])))
    assert all(abs(share - 1 / 3) < 0.04 for share in shares), shares


def test_answer_turn_of_a_merged_episode_is_its_last_action_in_context() -> None:
    # One episode as one sequence: two actions (weighted) between observations.
    weights = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    episode = TokenSequence("oracle", 1.0, 0, list(range(10)), list(range(1, 11)), weights)
    earlier = TokenSequence("oracle", 1.0, 1, [5, 6], [6, 7], [0.0, 1.0])
    (turn, other) = answer_turns([episode, earlier])
    assert turn.tokens == episode.tokens  # the whole context stays
    assert turn.weights == [0.0] * 7 + [1.0] * 3  # only the last action is a target
    assert other.weights == [0.0, 1.0]
    (window, _) = answer_windows([episode, earlier], 2)
    assert window.tokens == list(range(5, 10)) and window.weights == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_build_once_then_reuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build is made once per content key and found again without episodes; sources
    edited without changing a token roll the episodes out again but fit nothing; a model
    named before it is built is built from the episodes that named it (left on disk for
    the build, which may be another process's). Four small builds
    and two rollouts: 95 s on the 2-core development machine under other work."""
    from piexp.launch.sandbox import run_sandbox

    monkeypatch.setattr(build, "_models_root", lambda recipe: tmp_path / "models" / str(bool(recipe.substitutes)))
    monkeypatch.setattr(build, "HELDOUT_TASKS", 2)
    monkeypatch.setattr(build, "HELDOUT_ANSWERS", 2)
    opened: list[int] = []
    sandbox = build.data_config(TINY).sandbox

    def open_sandbox():
        opened.append(1)
        return run_sandbox(sandbox)

    path = build.ensure_learner_model(open_sandbox, TINY)
    marker = json.loads((path / build.MARKER).read_text())
    assert marker["digest"] == path.name and marker["episodes"] == 14
    assert marker["fit_allocator"] == "tcmalloc"  # the fit's own process (scripts/setup.sh installs it)
    assert marker["answer_windows"] == 4 and marker["heldout_answers"] == 2  # 6 copy episodes, 2 held out
    assert 0 <= marker["heldout_answer_accuracy"] <= 1 and 0 <= marker["heldout_window_answer_accuracy"] <= 1
    assert set(marker["mean_reward_by_policy"]) <= {"oracle", "crash"}
    assert marker.get("mean_reward_by_policy", {}).get("oracle", 1.0) == 1.0
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    # The folder carries the recipe's smaller vocabulary, and the model's output layer is its size.
    from piexp.tokenizer import load_offline_qwen3_tokenizer

    config = json.loads((path / "config.json").read_text())
    tokenizer = load_offline_qwen3_tokenizer(str(path))
    assert TINY.bpe_tokens is not None and config["vocab_size"] == len(tokenizer) == TINY.bpe_tokens + 26
    assert config["eos_token_id"] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert build.ensure_learner_model(open_sandbox, TINY) == path
    assert build.known_learner_model_dir(TINY) == path  # known without episodes
    assert opened == [1]  # the second call reused the build: no sandbox, no episodes
    # A comment edited in env/ changes the sources but not the episodes' tokens: they are
    # rolled out again (a sandbox) to find the same key, and nothing is fitted.
    sources = tmp_path / "sources" / "piexp"
    shutil.copytree(build.PACKAGE_ROOT, sources, ignore=shutil.ignore_patterns("__pycache__"))
    episode = sources / "env" / "episode.py"
    episode.write_text(episode.read_text() + "\n# a comment: no token of any episode changes\n")
    monkeypatch.setattr(build, "PACKAGE_ROOT", sources)
    assert build.known_learner_model_dir(TINY) is None
    weights = (path / "model.safetensors").stat().st_mtime_ns

    def no_fit(*args: object) -> None:
        raise AssertionError("the same episodes' tokens must not be fitted again")

    with monkeypatch.context() as patched:
        patched.setattr(build, "_fit", no_fit)
        assert build.ensure_learner_model(open_sandbox, TINY) == path
    assert opened == [1, 1] and (path / "model.safetensors").stat().st_mtime_ns == weights
    assert build.known_learner_model_dir(TINY) == path
    # A new recipe's model, named before it is built (a rollout, no fit), then built from
    # those episodes without rolling them out again; it replaces the old build.
    other_recipe = dataclasses.replace(TINY, seed=1)
    named = build.learner_model_dir(open_sandbox, other_recipe)
    assert build.read_marker(named) is None and opened == [1, 1, 1]
    assert build._unfitted_path(other_recipe, build.data_config(other_recipe)).is_file()  # for a job's build
    other = build.ensure_learner_model(open_sandbox, other_recipe)
    assert other == named and opened == [1, 1, 1]
    assert not list((other.parent / build.INPUTS_MEMO).glob("*.episodes.pickle"))  # taken, then removed
    assert other != path and not path.exists()
    # A variant that withholds csv_agg's oracle program: its episodes come from `wrong`,
    # and it keeps its own builds (learner-local's stays).
    withheld = dataclasses.replace(TINY, substitutes=(("csv_agg", "oracle", "wrong"),))
    variant = build.ensure_learner_model(open_sandbox, withheld)
    assert variant.parent != other.parent and other.exists()
    assert "wrong" in json.loads((variant / build.MARKER).read_text())["mean_reward_by_policy"]
    for bad in (("nope", "oracle", "wrong"), ("csv_agg", "oracle", "nope")):
        with pytest.raises(ValueError, match="nope"):
            build.ensure_learner_model(open_sandbox, dataclasses.replace(TINY, substitutes=(bad,)))
    assert opened == [1, 1, 1, 1]  # no sandbox for a recipe refused


def _long(count: int, length: int, seed: int) -> list[TokenSequence]:
    import random

    rng = random.Random(seed)
    sequences = []
    for i in range(count):
        tokens = [rng.randrange(8000) for _ in range(length + 1)]
        weights = [float(rng.random() < 0.3) for _ in range(length)]
        sequences.append(TokenSequence("p", 1.0, i, tokens[:-1], tokens[1:], weights))
    return sequences


def test_the_fit_makes_the_same_bytes_on_one_thread_as_on_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fit picks its thread count from the machine's load as it goes (ThreadBudget);
    the build stays one model per recipe only if that count never changes a byte."""
    import hashlib

    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from piexp.pretrain import training

    recipe = dataclasses.replace(
        LearnerRecipe(), steps=4, whole_turns_from_step=2, batch_sequences=2, copy_batch_sequences=4,
        whole_turn_batch_sequences=2, late_copy_batch_sequences=2, sampled_negatives=256, exact_positions=8,
    )  # fmt: skip
    digests = []
    for threads in (1, 2, 1):

        def choose(self: training.ThreadBudget, threads: int = threads) -> int:
            torch.set_num_threads(threads)
            return threads

        monkeypatch.setattr(training.ThreadBudget, "_choose", choose)
        torch.manual_seed(recipe.seed)
        model = AutoModelForCausalLM.from_config(Qwen3Config(**recipe.model_config()), dtype=torch.float32)
        report = training.fit(
            model, _long(6, 700, 0), _long(1, 300, 1), recipe,
            copies=_long(8, 64, 2), whole_turns=_long(4, 900, 3),
        )  # fmt: skip
        assert report.threads == {threads: recipe.steps}
        digests.append(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
    assert digests[0] == digests[1] == digests[2]


def test_hidden_at_the_kept_positions_is_the_whole_models_there() -> None:
    """The fit computes the last layer at the weighted positions only (training.hidden_at);
    its states there must be the whole model's, over padded batches, sequences kept at
    their last token or not, and rows with nothing kept; and so must their gradients."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from piexp.pretrain.training import hidden_at

    recipe = LearnerRecipe()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**recipe.model_config()), dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, recipe.model_config()["vocab_size"], (4, 300), generator=generator)
    keep = torch.rand((4, 300), generator=generator) < 0.2
    keep[1] = False  # a row with nothing kept
    keep[2, -1] = True  # a row kept at its last token
    keep[3, 250:] = False  # a row whose last positions are not needed
    whole = model.model(input_ids=tokens).last_hidden_state[keep]
    weights = torch.randn(whole.shape, generator=generator)
    (whole * weights).sum().backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    partial = hidden_at(model, tokens, keep)
    (partial * weights).sum().backward()
    assert partial.shape == whole.shape
    assert hidden_at(model, tokens, torch.zeros_like(keep)).shape == (0, whole.shape[1])  # nothing kept anywhere
    assert torch.allclose(partial, whole, atol=1e-5), float((partial - whole).abs().max())
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == expected.keys() and "model.layers.1.mlp.up_proj.weight" in grads
    for name, grad in grads.items():
        assert float((grad - expected[name]).norm() / expected[name].norm()) < 1e-5, name
