"""Every corpus case, project by project (the list the test and tools/corpus_report.py run)."""

from __future__ import annotations

from tests.corpus.cases import CASES as FIRST_CASES
from tests.corpus.cases import Case
from tests.corpus.cases_cuda_samples2 import cuda_samples2_cases
from tests.corpus.cases_dev_blog import dev_blog_cases
from tests.corpus.cases_kernel_tuner import kernel_tuner_cases
from tests.corpus.cases_learn_cuda import learn_cuda_cases

CASES: list[Case] = [
    *FIRST_CASES,
    *cuda_samples2_cases(),
    *kernel_tuner_cases(),
    *dev_blog_cases(),
    *learn_cuda_cases(),
]
