"""Test setup shared by every test: the repository root is importable, so class names such as
'examples.wordcount:SplitSentence' resolve as they do for `squall run` from the repository root."""

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
