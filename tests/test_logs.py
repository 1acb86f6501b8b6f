"""The console's rank rule (dnmopd.logs): rank 0 logs INFO; another rank only its warnings and the INFO of work it
does for the whole run (the weight sender's), tagged with its rank."""

import os
import subprocess
import sys

import pytest

SCRIPT = """
import logging
from dnmopd.logs import setup_logging
setup_logging()
logging.getLogger("dnmopd.trainer.trainer").info("update done")
logging.getLogger("dnmopd.trainer.trainer").warning("slow teacher")
logging.getLogger("dnmopd.serving.weight_group").info("weight-update group formed")
"""


@pytest.mark.parametrize("rank", ["0", "1"])
def test_the_senders_group_is_logged_on_whichever_rank_sends(rank):
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**os.environ, "RANK": rank}, capture_output=True,
                          text=True, check=True)
    lines = done.stderr.splitlines()
    assert sum("weight-update group formed" in line for line in lines) == 1
    assert sum("slow teacher" in line for line in lines) == 1
    assert sum("update done" in line for line in lines) == (rank == "0")
    assert all(("rank 1 " in line) == (rank == "1") for line in lines)
