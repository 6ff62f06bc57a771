#!/usr/bin/env python3
"""Print the pytest node ids that failed or errored in a JUnit XML report.

scripts/test.sh uses it to name the integration tests that failed in its
summary (the end of the output is what a CI log shows) and to run them once
more. Usage: junit-failed.py REPORT.xml [PREFIX]; PREFIX (default
test/integration/) is put before each node id so that pytest can be given
them from the repository root. Exit 0 with no output when nothing failed.
"""
import os
import sys
import xml.etree.ElementTree as ET


def node_id(case, prefix):
    # pytest writes classname as the dotted module path ("test_x" or
    # "test_x.TestClass") relative to its rootdir, and name as the test's
    # name with its parameters. The rootdir is test/integration when pytest
    # is given paths there (its pytest.ini), the repository root when it is
    # given none ("test.integration.test_x"): the module is the longest
    # dotted prefix that names a file, from here or under PREFIX.
    parts = case.get("classname", "").split(".")
    name = case.get("name", "")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        for candidate in (path, prefix + path):
            if os.path.isfile(candidate):
                return "::".join([candidate] + parts[i:] + [name])
    return "::".join([prefix + parts[0] + ".py"] + parts[1:] + [name])


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: junit-failed.py REPORT.xml [PREFIX]")
    prefix = sys.argv[2] if len(sys.argv) > 2 else "test/integration/"
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit("junit-failed.py: %s: %s" % (sys.argv[1], e))
    seen = set()
    for case in root.iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        nid = node_id(case, prefix)
        if nid not in seen:
            seen.add(nid)
            print(nid)


if __name__ == "__main__":
    main()
