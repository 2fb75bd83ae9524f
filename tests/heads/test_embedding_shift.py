"""Mean cosine and nearest-neighbour agreement on hand-made embeddings."""

from __future__ import annotations

import pytest
import torch

from headlab.heads.embedding_shift import mean_cosine, nearest_neighbours, nn_agreement


def test_hand_case():
    a = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert nearest_neighbours(a).tolist() == [1, 0, 3, 2]
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.1, 0.9], [0.9, 0.1]])
    # b's neighbours: 0 -> 3, 1 -> 2, 2 -> 1, 3 -> 0: only none agree with a.
    assert nn_agreement(a, b) == 0.0
    assert nn_agreement(a, 3 * a) == 1.0
    assert mean_cosine(a, 2 * a) == pytest.approx(1.0)
    assert mean_cosine(a, b) == pytest.approx(
        torch.nn.functional.cosine_similarity(a, b).mean().item()
    )


def test_shape_errors():
    with pytest.raises(ValueError, match=r"got \(3, 2\) and \(2, 2\)"):
        mean_cosine(torch.ones(3, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="at least 2 texts, got 1"):
        nn_agreement(torch.ones(1, 2), torch.ones(1, 2))
