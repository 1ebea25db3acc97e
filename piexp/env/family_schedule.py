"""Which family each slot of a training run takes (`tasks.family_weights`): slot g of the
run (batch index x batch size + position) goes to the family furthest behind its share
(smooth weighted round-robin: after n slots each family has had weight/total x n of them,
give or take one; ties go to the family listed first), as that family's k-th slot. No
state beyond a memo: a slot depends only on its number, so a resumed run gets the same
schedule. `WeightedFamilyDataset` and the adaptive-difficulty dataset fill slots by it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class FamilySchedule:
    """Slot number -> (family index into `families`, that family's occurrence number)."""

    def __init__(self, families: Sequence[str], weights: Mapping[str, float]) -> None:
        self.families = list(families)
        total = sum(weights.get(name, 1.0) for name in self.families)
        self.shares = [weights.get(name, 1.0) / total for name in self.families]
        self._slots: list[tuple[int, int]] = []  # slot -> (family index, its occurrence)
        self._counts = [0] * len(self.families)  # slots each family has had so far

    def slot(self, number: int) -> tuple[int, int]:
        counts = self._counts
        while len(self._slots) <= number:
            n = len(self._slots) + 1
            family = max(range(len(self.families)), key=lambda f: (self.shares[f] * n - counts[f], -f))
            self._slots.append((family, counts[family]))
            counts[family] += 1
        return self._slots[number]
