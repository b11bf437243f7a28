"""Arrays read from disk as they are used (recipe_zoo.core.streams) and batches over them: the same batches as the
in-memory tensors, in the same order, with worker processes or without, resumed from any position."""
import numpy as np
import pytest
import torch

from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.streams import LazyItems, NpyArray, NpyWriter, chunks


def write(path, a, chunk=7):
    with NpyWriter(path, a.dtype, a.shape[1:]) as w:
        for i in range(0, len(a), chunk):
            w.append(a[i:i + chunk])
    return path


def test_writer_makes_a_plain_npy_file_and_the_reader_reads_rows(tmp_path):
    a = np.random.default_rng(0).integers(0, 255, size=(50, 3, 4, 4), dtype=np.uint8)
    path = write(tmp_path / "x.npy", a)
    assert np.array_equal(np.load(path), a)  # numpy reads what the writer wrote
    x = NpyArray(path)
    assert len(x) == 50 and x.shape == (50, 3, 4, 4)
    assert torch.equal(x[3:9], torch.from_numpy(a[3:9]))
    idx = torch.tensor([7, 2, 2, 49, 0, 8])  # unordered, repeated
    assert torch.equal(x[idx], torch.from_numpy(a[idx.numpy()]))
    assert torch.equal(x[5], torch.from_numpy(a[5]))
    windows = torch.tensor([[1, 2, 3], [10, 11, 12]])  # 2-D index: token windows
    assert torch.equal(x[windows], torch.from_numpy(a[windows.numpy()]))
    with pytest.raises(IndexError):
        x[torch.tensor([50])]


def test_unsigned_tokens_are_widened_to_types_torch_computes_with(tmp_path):
    t = np.arange(70000, dtype=np.uint32) % 65536
    x = NpyArray(write(tmp_path / "t.npy", t.astype(np.uint16), chunk=1000))
    assert x[0:5].dtype == torch.int32 and x[torch.tensor([65535])].item() == 65535
    y = NpyArray(write(tmp_path / "u.npy", t + 70000, chunk=1000))
    assert y[0:2].dtype == torch.int64 and y[torch.tensor([1])].item() == 70001


def test_a_truncated_or_foreign_file_is_one_line(tmp_path):
    path = write(tmp_path / "x.npy", np.zeros((10, 4), dtype=np.float32))
    data = path.read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-8])
    with pytest.raises(ZooError, match="cut.npy: truncated"):
        NpyArray(tmp_path / "cut.npy")
    (tmp_path / "no.npy").write_text("hello")
    with pytest.raises(ZooError, match="no.npy: not a readable .npy file"):
        NpyArray(tmp_path / "no.npy")


def test_an_aborted_writer_leaves_nothing_under_the_final_name(tmp_path):
    with pytest.raises(RuntimeError):
        with NpyWriter(tmp_path / "x.npy", np.float32, (2,)) as w:
            w.append(np.zeros((3, 2)))
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def _take_all(batches, n):
    return [batches.next_batch() for _ in range(n)]


def flip_some(batch, g):  # an augmentation drawing from the batch's generator
    x, y = batch
    flip = torch.rand(len(x), generator=g) < 0.5
    return torch.where(flip[:, None], x.flip(-1), x), y


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_from_disk_equal_batches_from_memory_and_resume_exactly(tmp_path, workers):
    x = np.random.default_rng(1).normal(size=(37, 5)).astype(np.float32)
    y = np.arange(37)
    disk = NpyArray(write(tmp_path / "x.npy", x))
    mem = TensorBatches((torch.from_numpy(x), torch.from_numpy(y)), 8, seed=3, transform=flip_some)
    streamed = TensorBatches((disk, torch.from_numpy(y)), 8, seed=3, transform=flip_some, workers=workers)
    want = _take_all(mem, 13)  # across three epoch boundaries
    got = _take_all(streamed, 6)
    state = streamed.state_dict()
    resumed = TensorBatches((NpyArray(tmp_path / "x.npy"), torch.from_numpy(y)), 8, seed=3, transform=flip_some,
                            workers=workers)
    resumed.load_state_dict(state)
    got += _take_all(resumed, 7)
    for a, b in zip(want, got):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_workers_leave_the_global_generator_alone(tmp_path):
    """Starting the read-ahead workers (batches, evaluation chunks) draws nothing from torch's global generator,
    so dropout and the like after it are a run's without workers."""
    disk = NpyArray(write(tmp_path / "x.npy", np.arange(40, dtype=np.float32).reshape(20, 2)))
    torch.manual_seed(5)
    want = torch.rand(3)
    torch.manual_seed(5)
    TensorBatches((disk,), 4, seed=0, workers=1).next_batch()
    assert [len(c) for c in chunks(disk, 8, workers=1)] == [8, 8, 4]
    assert torch.equal(torch.rand(3), want)


def test_each_process_reads_only_its_own_micro_batches(tmp_path):
    """Two ranks together read what one process accumulating two micro-batches reads, and each reads only its
    share of the rows."""
    reads: list[list[int]] = [[], []]

    def source(rank):
        def read(idx):
            reads[rank].extend(idx.tolist())
            return torch.from_numpy(idx.astype(np.float32))[:, None]
        return LazyItems(40, read, (1,), torch.float32)

    one = TensorBatches((torch.arange(40.0)[:, None],), 5, seed=0)
    ranks = []
    for r in range(2):
        b = TensorBatches((source(r),), 5, seed=0)
        b.shard(r, 2)
        ranks.append(b)
    for _ in range(4):  # one epoch: 8 micro-batches of 5
        for b in ranks:
            assert torch.equal(b.next_batch()[0], one.next_batch()[0])
    assert len(reads[0]) == len(reads[1]) == 20
    assert not set(reads[0]) & set(reads[1]) and set(reads[0]) | set(reads[1]) == set(range(40))
