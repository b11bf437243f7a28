import subprocess

from recipe_zoo.core.envinfo import fingerprint, git_state


def test_git_state_ignores_the_zoos_own_result_files(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "leaderboard.md").write_text("# board\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    assert git_state(tmp_path)[1] is False
    (tmp_path / "leaderboard.md").write_text("# board\nrow\n")
    assert git_state(tmp_path)[1] is True
    assert git_state(tmp_path, ignore=("leaderboard.md",))[1] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path, ignore=("leaderboard.md",))[1] is True
    assert git_state(tmp_path.parent / "not-a-repo-anywhere") == ("unknown", False)


def test_fingerprint_names_hardware_and_versions(tmp_path):
    info = fingerprint(tmp_path)
    assert "threads" in info["hardware"] or "x" in info["hardware"]
    assert info["torch"] and info["python"] and "numpy" in {k.lower() for k in info["packages"]}
