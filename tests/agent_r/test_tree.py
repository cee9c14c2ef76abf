"""UCT selection and backpropagation on a hand-built tree (kit/studies/agent_r/tree.py)."""

import math

import pytest

from kit.studies.agent_r.tree import Node, backpropagate, insert, lowest_common, select, uct


def _tree():
    root = Node()
    a = insert(root, [[1], [2]], [False, False], 0)
    b = insert(root, [[1], [3]], [False, True], 1)
    c = insert(root, [[4]], [False], 2, terminal=False)  # a path still going on
    for leaf, r in ((a, 1.0), (b, 0.0), (c, 0.0)):
        backpropagate(leaf, r)
    return root, a, b, c


def test_backpropagate_counts_and_values_along_the_path():
    root, a, b, c = _tree()
    n1 = root.children[0]
    assert (root.visits, root.value_sum) == (3, 1.0)
    assert (n1.visits, n1.q) == (2, 0.5)
    assert (a.visits, a.q, b.q, c.q) == (1, 1.0, 0.0, 0.0)
    assert b.failed_call and not a.failed_call and lowest_common(a, b) is n1 and lowest_common(a, c) is root


def test_uct_formula_and_selection():
    root, a, b, c = _tree()
    n1, n4 = root.children
    assert uct(n1, 2.0) == pytest.approx(0.5 + 2.0 * math.sqrt(math.log(3) / 2))
    assert uct(n4, 2.0) == pytest.approx(0.0 + 2.0 * math.sqrt(math.log(3) / 1))
    root.expansions = 2
    # c = 2: exploration favours the once-visited n4 (2.10 > 1.55); c = 0: the higher Q of n1
    assert select(root, 2.0, width=2, max_depth=5) is n4  # n4 not fully expanded: stop there
    assert select(root, 0.0, width=2, max_depth=5) is n1
    n1.expansions = 2
    assert select(root, 0.0, width=2, max_depth=5) is n1  # its children are finished: expand n1 again
    assert select(root, 0.0, width=2, max_depth=1) is n1  # depth limit
    assert select(root, 0.0, width=3, max_depth=5) is root  # root not fully expanded at width 3
    unvisited = Node((9,), 1, root)
    root.children.append(unvisited)
    assert uct(unvisited, 0.0) == math.inf and select(root, 0.0, width=2, max_depth=5) is unvisited


def test_insert_merges_identical_turns():
    root = Node()
    insert(root, [[1], [2]], [False, False], 0)
    leaf = insert(root, [[1], [2]], [False, False], 1)
    assert len(root.children) == 1 and leaf.leaves == [0, 1] and leaf.terminal
    with pytest.raises(ValueError):
        insert(root, [[1]], [], 2)


def test_agent_r_config_values_are_checked():
    from kit.config import ConfigError, load

    assert load("smoke", write=False).agent_r.iterations == 2
    for key, value, match in (("agent_r.beta", 0.8, "beta"), ("agent_r.alphas", [0.5, 1.5], "alphas"),
                              ("agent_r.transition", "actor", "transition"), ("agent_r.width", 0, "width"),
                              ("agent_r.simulations", 1, "simulations"), ("agent_r.eta", -0.1, "eta")):
        with pytest.raises(ConfigError, match=match):
            load("smoke", overrides={key: value}, write=False)


def test_notebook_11_teaches_and_closes_with_its_findings():
    import nbformat

    from kit import plan

    assert "11_agent_r" in plan.SERIES and plan.SERIES.index("11_agent_r") < plan.SERIES.index(
        "20_figures_and_tables")  # before 20, so that claims.json carries the Agent-R verdicts
    nb = nbformat.read(plan.NOTEBOOK_DIR / "11_agent_r.ipynb", as_version=4)
    opening = nb.cells[0].source
    assert "## The method" in opening and "## What to look at" in opening and r"\mathrm{UCT}(s)" in opening
    assert "from kit.studies.agent_r.chain import agent_r_findings" in nb.cells[-1].source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_notebook_11_on_the_verl_runtime_searches_nothing_and_says_so(tmp_path):
    from kit.studies.agent_r.chain import agent_r_config, agent_r_findings, run_agent_r
    from kit.studies.agent_r.views import first_tree_figure, revisions_html

    cfg = agent_r_config("paper-14b", {}, str(tmp_path), 0)
    assert "local engine" in run_agent_r(cfg, tmp_path, tmp_path / "sft")["skipped"]
    assert first_tree_figure(tmp_path) is None and "No revision trajectory" in revisions_html(tmp_path)
    assert "No policy was evaluated" in agent_r_findings(tmp_path)
