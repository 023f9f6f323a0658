"""CINIC-10 (Darlow, Crowley, Antoniou and Storkey, "CINIC-10 is not ImageNet or
CIFAR-10", arXiv:1810.03505, 2018), the third data set of FedAWE (Xiang et al., NeurIPS
2024, Sec. 6 and App. J.2: 32x32 colour images of CIFAR-10's ten classes, 90000 for
training and 90000 for testing).

Its published layout is ``train/``, ``valid/`` and ``test/`` folders, each with one folder
per class (``airplane`` ... ``truck``) of 32x32 PNGs. It is kept under
``data.root/CINIC-10`` (where the FedAWE authors' code looks for it) and read into the
arrays :func:`~fedram_flwr.data.sources.read_cifar10` returns. Training uses ``train/``,
testing ``test/``, as in the paper; ``valid/`` is not read.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from fedram_flwr.data.files import DatasetNotFoundError, fetch_into

CINIC10_URL = "https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz"
CINIC10_FOLDER = "CINIC-10"
CINIC10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
"""Class folders in label order: CIFAR-10's labels, which is also the alphabetical order
torchvision's ``ImageFolder`` gives them."""


def has_split(folder: Path, split: str) -> bool:
    """Whether ``folder/split`` has every class folder of CINIC-10."""
    return all((folder / split / name).is_dir() for name in CINIC10_CLASSES)


def read_cinic10(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Every ``folder/split/<class>/*.png``: label c for class folder
    ``CINIC10_CLASSES[c]``, files in sorted name order within a class (``ImageFolder``'s
    order). Greyscale PNGs (some of CINIC-10's ImageNet images) become RGB by repeating
    the grey level, as PIL's ``convert("RGB")`` does. Returns float32 (N, 3, 32, 32) in
    [0, 1] and int64 labels, like :func:`~fedram_flwr.data.sources.read_cifar10`."""
    from PIL import Image

    images: list[np.ndarray] = []
    labels: list[int] = []
    for label, name in enumerate(CINIC10_CLASSES):
        for path in sorted((folder / split / name).glob("*.png")):
            with Image.open(path) as img:
                pixels = np.asarray(img.convert("RGB"), dtype=np.uint8)
            if pixels.shape != (32, 32, 3):
                raise ValueError(f"CINIC-10: {path} is {pixels.shape[:2]}, not a 32x32 image")
            images.append(pixels)
            labels.append(label)
    if not images:
        raise DatasetNotFoundError(f"CINIC-10: no PNG images under {folder / split}")
    x = np.stack(images).transpose(0, 3, 1, 2).astype(np.float32) / 255.0
    return x, np.asarray(labels, dtype=np.int64)


def load_cinic10(root: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """CINIC-10's training (``train/``) or test (``test/``) images from
    ``root/CINIC-10``; when that split is missing, the published archive is downloaded
    from :data:`CINIC10_URL` and unpacked there (about 690 MB; the archive is deleted
    afterwards). No checksum is published, so none is checked."""
    from torchvision.datasets import utils

    folder, split = root / CINIC10_FOLDER, "train" if train else "test"
    if not has_split(folder, split):
        download = partial(
            utils.download_and_extract_archive, CINIC10_URL, folder, remove_finished=True
        )
        how = (
            f"download {CINIC10_URL} on a machine with internet and unpack it into {folder} "
            "(it holds train/, valid/ and test/, one folder per class of 32x32 PNGs); "
            "remove a partial CINIC-10.tar.gz left there"
        )
        fetch_into(folder, "cinic10", download, how)
        if not has_split(folder, split):
            raise DatasetNotFoundError(
                f"cinic10: the archive from {CINIC10_URL} unpacked into {folder} has no "
                f"{split}/ folder with the classes {', '.join(CINIC10_CLASSES)}"
            )
    return read_cinic10(folder, split)
