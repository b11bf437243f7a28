"""The diffusion recipes' own split of MNIST's test digits (the files are the image sets' ``mnist-test``)."""
from __future__ import annotations

from recipe_zoo.core.datasets import DatasetInfo, dataset
from recipe_zoo.recipes.image_datasets import MNIST_TEST

MNIST = dataset(DatasetInfo(
    name="mnist", domain="vision", source="cache", path="vision/mnist_test",
    description="the same 10,000 MNIST test digits, split for generative models (diffusion recipes)",
    split="about 8,000 train / 1,000 validation / 1,000 test by a hash of each image; FID on test",
    metric="fid_zoo (lower is better)",
    downloads=MNIST_TEST.downloads, info=MNIST_TEST.info))
