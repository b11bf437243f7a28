"""The "## Settings" section of every domain page is what ``zoo show`` prints of its recipes today: a page that
differs fails here, and ``python -m recipe_zoo.docs_settings`` rewrites it. No training, no board."""
import shutil

import pytest

from conftest import ROOT
from recipe_zoo import docs_settings


def test_every_domain_page_shows_the_settings_zoo_show_prints():
    differ = docs_settings.stale_pages(ROOT, write=False)
    assert not differ, (f"{[str(p.relative_to(ROOT)) for p in differ]}: the Settings section differs from the code; "
                        "rewrite it with python -m recipe_zoo.docs_settings")


def test_every_recipe_has_a_page_and_every_page_a_recipe():
    from recipe_zoo.registry import static_list

    domains = {row["name"].split("/")[0] for row in static_list()}
    assert domains == set(docs_settings.DOMAINS)
    assert all(docs_settings.domain_recipes(d) for d in docs_settings.DOMAINS)


def test_check_names_the_page_that_differs_and_a_rewrite_mends_it(tmp_path, capsys):
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png", "pictures"))
    page = tmp_path / "docs" / "tabular.md"
    page.write_text(page.read_text().replace("= 'california-housing'", "= 'somewhere-else'", 1))
    assert docs_settings.main(["--check", "--root", str(tmp_path)]) == 1
    assert "docs/tabular.md: its Settings section differs" in capsys.readouterr().err
    assert docs_settings.main(["--root", str(tmp_path)]) == 0
    assert docs_settings.main(["--check", "--root", str(tmp_path)]) == 0
    assert page.read_text() == (ROOT / "docs" / "tabular.md").read_text()


def test_a_page_without_the_markers_is_named(tmp_path):
    with pytest.raises(SystemExit, match="nowhere.md: no"):
        docs_settings.rendered("# a page\n", "generated", tmp_path / "nowhere.md")
