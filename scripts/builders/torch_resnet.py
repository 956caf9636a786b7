"""ResNet-18 as TorchScript: torchvision's where it is installed, else the same network built
from torch.nn (random weights either way: no download; speed does not depend on them)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, inside: int, outside: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inside, outside, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outside)
        self.conv2 = nn.Conv2d(outside, outside, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outside)
        self.down: nn.Module = nn.Identity()
        if stride != 1 or inside != outside:
            self.down = nn.Sequential(
                nn.Conv2d(inside, outside, 1, stride, bias=False), nn.BatchNorm2d(outside)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class ResNet18(nn.Module):
    """torchvision's resnet18 layout: a 7x7 stem, four stages of two basic blocks, a linear
    classifier; input [N, 3, 224, 224], output [N, 1000]."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        self.layers = nn.Sequential(
            *[nn.Sequential(Block(i, o, s), Block(o, o, 1)) for i, o, s in widths]
        )
        self.fc = nn.Linear(512, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(image))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnet18(seed: int = 0) -> tuple[nn.Module, str]:
    """The network in eval mode and where it came from."""
    torch.manual_seed(seed)
    try:
        import torchvision
    except ImportError:
        return ResNet18().eval(), "torch.nn (torchvision is not installed)"
    model: Any = torchvision.models.resnet18(weights=None)
    return model.eval(), f"torchvision {torchvision.__version__}"
