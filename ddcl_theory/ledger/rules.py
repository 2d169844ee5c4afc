"""The registered decision rules of the empirical claims (second edition), frozen.

Each empirical claim's :class:`~ddcl_theory.ledger.design.Rule` is data here, written from the
exploratory runs (the cpu profile's pilots and the first edition's reference runs, whose
spreads size the seeds) and frozen before the confirmatory reference run: the provenance of a
reference result records the digest of its claims' rules, and a reference result computed under
another rule is stale (``make check-reference``). A rule changed after its confirmatory run is
an amendment: the chapter says so and shows both words, and the registered rule's word stays
the headline until a new confirmatory run on fresh seeds.

Seeds: the confirmatory runs use :func:`ddcl_theory.runtime.settings.confirmatory_seeds`, seeds
no exploratory run used.
"""
from __future__ import annotations

import hashlib

from ddcl_theory.ledger.design import Rule, Test

__all__ = ["RULES", "PAPER_RULES", "Rule", "Test", "digest"]

#: claim id -> its registered rule.
RULES: dict[str, Rule] = {}
#: claim id -> its rule on the papers' model and data (the paper profile, on a GPU), registered
#: before any paper-scale run; where one exists, the paper profile's record of the claim.
PAPER_RULES: dict[str, Rule] = {}

# --- D14 (text_readout): a DDCL readout on a frozen text encoder beats the mean-pooling and
# [CLS] probes on SST-2, IMDB and 20 Newsgroups. One test per corpus and probe.
D14_CORPORA = ("SST-2", "IMDB", "20 Newsgroups")
D14_BASELINES = ("mean-pooling", "[CLS]")
D14_SESOI = 0.02
D14_WHY = ("two points of test accuracy: the smallest gain for which a practitioner would "
           "replace a closed-form pooling and a convex probe by a readout that must be trained "
           "and tuned; the paper reports no baseline, so there is no gap to take a share of")
RULES["D14"] = Rule(
    tests=tuple(Test(f"test accuracy, DDCL readout - {base} probe, {corpus}", ">", margin=0.0,
                     sesoi=D14_SESOI, why=D14_WHY, design="paired",
                     method="bootstrap over seeds and items")
                for corpus in D14_CORPORA for base in D14_BASELINES),
    n_seeds=10,
    scales="training documents (a quarter, a half and all of each training draw, separate runs)",
    power=("cpu pilot, 3 seeds: the per-seed sd of a paired difference, 0.012-0.067, is "
           "mostly test-item noise (the arms disagree on 14-25% of items); at the reference "
           "draws' 87-200 test items per seed it is 0.040-0.059, so 10 seeds detect "
           "0.040-0.059 at 80% power; telling 0 from 0.02 would take 3,000-5,000 test items "
           "per corpus, beyond this budget's embedding time (SST-2 has 872), and more seeds "
           "only split the same test draw: 10 seeds, the minimum for runs of seconds"),
    gates=("every confirmatory DDCL run stops at a validation plateau or past its validation "
           "optimum, not at the epoch cap",
           "every probe fitted at its chosen C converges (lbfgs)"),
    note=("Both arms are tuned on the same validation fold of each training draw with equal "
          "grids (32 DDCL configurations: K, heads, learning rate, tau; 32 values of C per "
          "probe). Each seed is scored on its own part of the test draw. The binding test is "
          "the one, among those giving the claim's word, whose interval lies lowest, tests "
          "against each corpus's stronger probe on validation first. k-means on [CLS] and the "
          "DDCL clusterings are shown beside."))

# --- D15 (ddcl_layer): the DDCL layer with residual connection and LayerNorm drops into a
# standard Transformer encoder, as its readout and as a block between its layers: it trains,
# and it costs no more than two points of accuracy against the same encoder without it.
#: The non-inferiority margin of both comparisons (points of test accuracy / 100).
D15_MARGIN = -0.02
D15_WHY = ("two points of test accuracy: about one seed-to-seed standard deviation of the "
           "mean-pool model's test accuracy in the first edition's runs (0.019), so a loss "
           "within it is not seen when a model is retrained, while a larger loss is what a "
           "practitioner who swaps the pooling stage or inserts a layer would notice; the same "
           "two points as the readout claim D14")
D15_TRAINS_WHY = ("a layer that trains lifts test accuracy at least 5 points above chance "
                  "(0.10) in this setting, the first edition's margin")
D15_SEEDS = 12
RULES["D15"] = Rule(
    tests=(
        Test("test accuracy, DDCL readout - mean-pool readout of the same encoder (same seed)",
             ">", margin=D15_MARGIN, why=D15_WHY, design="paired",
             method="bootstrap over seeds and items"),
        Test("test accuracy, encoder with a DDCL block between its layers - the same encoder "
             "without it (same seed)", ">", margin=D15_MARGIN, why=D15_WHY, design="paired",
             method="bootstrap over seeds and items"),
        Test("test accuracy - chance, DDCL readout", ">", margin=0.05, why=D15_TRAINS_WHY,
             design="one-sample", method="bootstrap over seeds and items"),
        Test("test accuracy - chance, encoder with the DDCL block", ">", margin=0.05,
             why=D15_TRAINS_WHY, design="one-sample", method="bootstrap over seeds and items"),
    ),
    n_seeds=D15_SEEDS,
    scales="training images (separate runs on 250 and 1,000 images, 12 epochs each)",
    power=("pilot: 6 exploratory seeds at the reference settings on 1,000 images gave paired "
           "differences readout - mean pool -0.076 (sd 0.022) and block - mean pool +0.010 "
           "(sd 0.020); telling a true difference of 0 from the margin -0.02 with 80% power "
           "takes 12 and 10 seeds (noncentral t), so 12"),
    gates=("every deciding run's validation cross-entropy, on training images no run trains "
           "on, has stopped falling at its last epoch (the mean of its last two epochs no more "
           "than 5% below the two before); the model of its lowest validation cross-entropy "
           "is the one tested",),
    note=("Non-inferiority: the SESOI of tests 1 and 2 is their margin (the claim names its "
          "size), so each is not reproduced when its interval lies wholly below -0.02. A "
          "non-finite loss or V < 0 at any step of any run makes the word not reproduced. "
          "Seed s gives the three models the same encoder and classifier initialisation and "
          "the same batch order; all are tested on the same test images."),
)

# ------------------------------------------------------------------------------------- D17
#: D17's readouts keep S = 20 vectors (the 20 Newsgroups classes). Both readings of collapse
#: are divided by S, so one vector's worth is 1 / S.
D17_SLOTS = 20
#: The smallest effect of interest of every D17 test: one of the S vectors' worth.
D17_SESOI = 1 / D17_SLOTS
D17_SESOI_WHY = ("one of the S = 20 vectors' worth (1 / S): the smallest gain a user of S "
                 "slots, latents or prototypes would notice as one more vector at work; the "
                 "sources give no number")
#: The seeds of D17's confirmatory run (the study's ``D17_SEEDS`` must agree).
D17_SEEDS = 30
#: Which of D17's confirmatory runs the study makes (its ``D17_CONFIRMATORY_RUN`` must agree):
#: the fourth thousand of seeds, since the exploratory tuning grids that shaped the amendment
#: trained on seeds 2000 and 3000.
D17_RUN = 4
_D17_MOST = "each at its most collapsed equivalent configuration"
_D17_LEAST = "each at its least collapsed equivalent configuration"


def _d17_rank(peer: str, configuration: str) -> Test:
    return Test(f"effective rank of the S attention maps / S, DDCL - {peer}, {configuration} "
                "(same seed and sequences)", ">", 0.0, D17_SESOI, D17_SESOI_WHY,
                method="bootstrap over seeds and items")


def _d17_usage(peer: str) -> Test:
    return Test(f"usage perplexity of the tokens' first choices / S, DDCL - {peer}, "
                f"{_D17_MOST} (same seed and tokens)", ">", 0.0, D17_SESOI, D17_SESOI_WHY)


RULES["D17"] = Rule(
    tests=(_d17_rank("Slot Attention", _D17_MOST), _d17_rank("Perceiver", _D17_MOST)),
    beside=(_d17_usage("Slot Attention"), _d17_usage("Perceiver"),
            _d17_rank("Slot Attention", _D17_LEAST), _d17_rank("Perceiver", _D17_LEAST)),
    n_seeds=D17_SEEDS,
    scales="training length (separate runs of 5, 10 and 20 epochs on 20 Newsgroups, each "
           "with its own warm-up and cosine decay; five seeds at 5 and 10 epochs; the most "
           "collapsed configurations)",
    power="pilot: the second confirmatory run (seeds from 2000) and its rerun, 30 seeds at "
          "20 epochs; per-seed sd of the maps-rank differences 0.018 against a Slot Attention "
          "at a collapsed configuration (rank / S 0.12) and 0.032 against one at an "
          "uncollapsed one (0.44), 0.082 and 0.087 against the Perceiver; usage, beside, 0.049 "
          "to 0.056 and 0.120 to 0.137; 80% power to tell 0 from the SESOI needs 4, 6, 24 and "
          "26 seeds for the maps rank and 10 to 13 and 48 to 62 for the usage; 30 seeds power "
          "every maps-rank test and the usage against Slot Attention; the usage against the "
          "Perceiver is decided beside at what 30 seeds resolve",
    gates=(
        "tau below T_c: every deciding DDCL run trains L_q at tau below that loss's critical "
        "temperature T_c = 4 lambda_max of its current tokens, at the start and at every "
        "epoch to the end",
        "settled: over the last quarter of the deciding schedule each deciding test's "
        "seed-mean paired difference moves by less than half its SESOI (the tests beside "
        "report theirs)",
        "learned: every deciding run's test accuracy is at least 0.1 above chance (1 / 20) "
        "(the least collapsed runs report theirs)",
    ),
    note="Tuning: each readout's learning rate and attention temperature come from one grid "
         "of five rates (3e-4 to 3e-2) and five temperature factors (0.03 to 3 times its "
         "default), each configuration trained once on four fifths of the training sequences. "
         "Its equivalent configurations are those whose validation accuracy on the held-out "
         "fifth lies within one binomial standard error of its best (the one-standard-error "
         "rule): the split cannot tell them apart, so a user who tunes by validation accuracy "
         "may keep any of them. Each readout runs at two of them, chosen by the maps rank / S "
         "of their tuning runs (on training sequences, not the test set): the most collapsed "
         "and the least collapsed. The claim is about a guarantee, so the deciding tests read "
         "the worst a user can get: each readout at its most collapsed equivalent "
         "configuration. The least collapsed are decided beside (how close a peer at its best "
         "comes to DDCL), as is the usage of the first choices, which falls only when vectors "
         "read no token: maps that nearly coincide split the first choices between them "
         "evenly, so the usage scores a peer whose vectors coincide at its maximum (the "
         "chapter shows it on constructed maps); it was the first edition's registered "
         "statistic. Slot Attention's iterations and FLOPs against DDCL's are counted beside. "
         "Amended twice. After the first confirmatory run (seeds from 1000), whose tuning "
         "broke ties by grid order: four of the Perceiver's configurations tied at the top "
         "validation accuracy and gave maps ranks from 0.17 to 0.45. After the second (seeds "
         "from 2000), which kept the configuration of best validation accuracy, ties broken by "
         "the cross-entropy: its rerun in a later session, on the same seeds, kept another "
         "configuration for Slot Attention (temperature 0.03 instead of a collapsing one), "
         "and the test against it moved from +0.337 [+0.330, +0.344] (reproduced) to +0.024 "
         "[+0.012, +0.036] (not reproduced). Exploratory grids on tuning seeds 2000 and 3000 "
         "then showed six and seven of Slot Attention's 25 configurations within one standard "
         "error of its best, with maps ranks / S from 0.09 to 0.46 among them: the choice of "
         "one configuration decided the word. The fourth run (seeds from 4000) is the "
         "amended rule's.",
)

# ------------------------------------------------------------------------------------- D13
# Orbital debris: DDCL against k-means on this book's own synthetic catalogue (the paper's data
# are not available, so the paper's 0.772 vs 0.756 is a scale of effect, not a target). Both
# arms start from the same k-means++ draws; each keeps its start of lowest own objective.
#: The smallest accuracy gain of interest: the paper's own gain.
D13_SESOI_ACC = 0.016
D13_SESOI_ACC_WHY = ("the paper's own gain, 0.772 - 0.756; on this book's catalogue it is a "
                     "scale, not a target: a smaller gain would not make a practitioner "
                     "prefer DDCL to k-means")
#: "Grows monotonically": the share of epochs without a fall of the smallest distance.
D13_MONOTONE = 0.99
D13_MONOTONE_WHY = ("the claim names its own size, a share of 1; the margin allows a fall at "
                    "one epoch in a hundred, and moves below 1e-4 of the largest distance "
                    "(float32 rounding and the jitter of a settled bank) are not falls")
#: Classes owning a cluster: half the claimed contrast of one class per catalogue.
D13_FILL_SESOI = 0.5
D13_FILL_WHY = ("half the claimed contrast: the claim pictures one class more per catalogue "
                "(each class owning a cluster where k-means gives LEO two); half of it is one "
                "class more in every other catalogue")
#: A deciding head run's accuracy may move by at most this over its last tenth of epochs
#: (a third of the SESOI).
D13_SETTLED_ACC = 0.005
RULES["D13"] = Rule(
    tests=(
        Test("clustering accuracy, DDCL head - k-means, each the best of the seed's shared "
             "k-means++ starts by its own objective (inertia; the head's L_q)", ">", 0.0,
             D13_SESOI_ACC, D13_SESOI_ACC_WHY, design="paired", method="paired t"),
        Test("share of epochs at which the DDCL head's smallest prototype distance did not "
             "fall (mean over the seed's starts)", ">", D13_MONOTONE, None, D13_MONOTONE_WHY,
             design="one-sample", method="one-sample t"),
        Test("classes owning a cluster (the most frequent class of one), DDCL head - "
             "k-means, best starts as in (1)", ">", 0.0, D13_FILL_SESOI, D13_FILL_WHY,
             design="paired", method="paired t"),
    ),
    n_seeds=26,
    scales="catalogue size (separate catalogues of 1,000, 3,000 and 10,000 objects, the "
           "smaller ones on the first three seeds)",
    power="pilot at the reference settings, 24 exploratory catalogues of 10,000 objects "
          "(seeds 0-23): test 1's per-seed sd 0.028 asks for 26 seeds to tell 0 from 0.016 "
          "at 80% power; tests 2 and 3 ask for 2 (a share of epochs without a fall near 0.89 "
          "against 0.99, one class more in every catalogue); "
          "the one-start gain beside (sd 0.053) would need 88, beyond the budget of one core",
    gates=("V >= 0 at every epoch of every DDCL run (V is a sum of squares: a negative value "
           "is a numerical defect that voids the run)",
           "the training loss (L_q) of every deciding head run at its plateau: the mean of the "
           "last tenth of the epochs within 1% of the tenth before",
           f"the accuracy of every deciding head run moved by at most {D13_SETTLED_ACC:g} over "
           "the last tenth of its epochs"),
    note="Both arms start from the same ten k-means++ draws per catalogue (scikit-learn's "
         "kmeans_plusplus); each keeps the start of its own lowest objective, never the one of "
         "the best accuracy. Beside: the gain at one shared start (averaged over the starts, "
         "with the seeds a decision there would need), the head at other temperatures, the "
         "head trained by gradient descent, a DDCL readout and a Gaussian mixture.",
)


# ------------------------------------------------------------------------------------- D10
# D10 (free_energy): a free energy is a Lyapunov function that guarantees convergence to S(P) > 0,
# also under decreasing temperature schedules. The Lyapunov half is logical: under cooling the
# function that cannot rise is G = F + N tau log K (proved; F itself can rise), checked on every
# trajectory (a rise would be a counterexample to the proof). The guarantee is measured where
# cooling ends, from many starts, on S_min (the separation the statement names: no two
# prototypes coincide); the spread reading (S_mean, "not collapsed") is decided beside.
#: The smallest separation of interest, in units of sqrt(tr C) of the tokens.
D10_SESOI = 0.01
D10_SESOI_WHY = ("a hundredth of the tokens' spread sqrt(tr C): the resolution at which the "
                 "chapter's annealing counts two prototypes as one group; at the end of cooling "
                 "the prototypes' mean distance is 1.2-1.3 sqrt(tr C), so two prototypes closer "
                 "than this are one prototype to any reader of the bank")
#: G may rise by this much of |G| at the start of a trajectory (float64 rounding) and not count.
D10_G_TOLERANCE = 1e-12
#: A gradient run has settled when its last step moves no coordinate more than this x sqrt(tr C).
D10_SETTLED = 1e-3
D10_SEEDS = 20
#: Deviations from the centroid below this x sqrt(tr C) are carried to first order
#: (:data:`ddcl_theory.experiments.cooling.LINEAR_BELOW`, the same number).
D10_CARRIED = 1e-6


def _d10_test(statistic: str, schedule: str) -> Test:
    return Test(f"{statistic} / sqrt(tr C) at the end of the {schedule}, per start", ">", 0.0,
                D10_SESOI, D10_SESOI_WHY, design="one-sample", method="one-sample t")


D10_SCHEDULES = ("longest linear schedule", "longest exponential schedule",
                 "annealed runs from collapse")
RULES["D10"] = Rule(
    tests=tuple(_d10_test("S_min (smallest prototype distance)", s) for s in D10_SCHEDULES),
    beside=tuple(_d10_test("S_mean (mean prototype distance)", s) for s in D10_SCHEDULES),
    n_seeds=D10_SEEDS,
    scales="schedule length (separate runs of 40, 400 and 4,000 gradient steps from 1.5 T_c "
           "to 0.05 T_c, T_c = 2 lambda_max(C))",
    power="cpu pilot (20 k-means++ starts at 40 and 400 steps, 3 at 4,000, 3 annealed runs) "
          "and the second confirmatory run (20 starts, deviations near collapse carried to "
          "first order): at 4,000 steps the per-start sd of S_min / sqrt(tr C) is about 1.5e-5 "
          "(linear) and below 1e-14 (exponential, annealed), every start ending in nearly the "
          "same configuration, so 2 to 4 starts tell 0 from the SESOI; the rule registers 20 "
          "starts, which see a failure met by one start in seven with 95% probability (at 400 "
          "steps the linear schedule's sd, 0.117, would ask for about 1,080)",
    gates=(f"G = F + N tau log K never rises along any gradient run by more than "
           f"{D10_G_TOLERANCE:g} of |G| at its start (the Lyapunov half, proved: a rise is a "
           "counterexample and voids the run)",
           f"every gradient run of the longest schedules has settled (its last step moves no "
           f"coordinate more than {D10_SETTLED:g} sqrt(tr C)) and every annealed run settled at "
           "its last temperature"),
    note="The word is the S_min reading's; the spread reading (S_mean > 0: the bank is not "
         "collapsed) is decided beside by the same design. The Lyapunov half is decided by "
         "proof; F, which rises under cooling, is shown beside G. Runs at a fixed temperature "
         "(above T_c collapse is F's minimum) are shown on the page, not decided on. A run whose "
         f"deviations fell below {D10_CARRIED:g} sqrt(tr C) is carried to first order (the "
         "split exact arithmetic gives) and run again in float64 coordinates from the same "
         "start; a reproduced word becomes qualified when such a float64 twin ends with S_min "
         "below the SESOI: the guarantee then holds in exact arithmetic, not in the floating "
         "point a layer is trained in (amended before the third confirmatory run).",
)


# -------------------------------------------------------------------------------------- D9
# D9 (timescales): joint training of an encoder and the prototypes at eps = eta_theta / eta_P;
# the separation S (smallest distance between two prototypes) grows for eps <= 0.1, and the
# prototypes collapse at eps = 1 (one source: already at eps >= 0.5). Two readings of the
# learning rates: Adam (per-coordinate steps, so eps is the ratio of the two blocks' step
# sizes) decides; plain SGD (eps scales raw gradient steps) is decided beside by the same tests.
#: "Collapse" in the claim's own size: a tenfold loss of separation against eps = 0.1.
D9_COLLAPSE = -2.302585092994046                       # log 0.1
#: The smallest growth of interest: a tenth of the collapse on the log scale (S a quarter up).
D9_GROWTH = 0.2302585092994046                         # log 10 / 10
D9_GROWTH_WHY = ("a tenth of the claimed collapse on the log scale, log 10 / 10: the two "
                 "closest prototypes end 26% farther apart than they started, the least a "
                 "reader of a separation curve would call growth; the sources give no size")
D9_COLLAPSE_WHY = ("the claim's own size: a collapse is a tenfold loss of separation against "
                   "the stable ratio's run from the same start")
D9_SEEDS = 40


def _d9_tests(reading: str) -> tuple[Test, ...]:
    """The three D9 tests on one reading (``"Adam"``, ``"SGD, eta_P = 1"``); a run that
    collapsed (S below 0.05 of its start) or diverged enters each with log(S_end / S_start) =
    log 0.05, the collapse rule's threshold."""
    return (
        Test(f"log(S_end / S_start) at eps = 0.1 ({reading})", ">", 0.0, D9_GROWTH,
             D9_GROWTH_WHY, design="one-sample", method="one-sample t"),
        Test(f"log(S_end / S_start) at eps = 0.01 ({reading})", ">", 0.0, D9_GROWTH,
             D9_GROWTH_WHY, design="one-sample", method="one-sample t"),
        Test(f"log S_end(eps = 1) - log S_end(eps = 0.1), same seed ({reading})", "<",
             D9_COLLAPSE, D9_COLLAPSE, D9_COLLAPSE_WHY, design="paired", method="paired t"),
    )


RULES["D9"] = Rule(
    tests=_d9_tests("Adam"),
    n_seeds=D9_SEEDS,
    scales="run length (separate runs of 12, 24 and 48 epochs, each with its own cosine "
           "decay of both learning rates to 1% of their start)",
    power="pilot of 10 exploratory seeds at the reference settings: per-seed sd 1.11, 0.31 "
          "and 0.96 for tests 1 to 3; test 3 needs 4 seeds to tell its estimate (+0.28) from "
          "log 0.1, test 2 needs 17 and test 1 185 to tell 0 from the SESOI (test 1's spread "
          "is the one run in ten whose prototypes met); 185 seeds are beyond the budget of "
          "30 minutes on one core (about 30 s a seed), so the rule registers the 40 it allows, "
          "which detect a growth of about 0.5 in test 1; about 185 seeds (some 95 minutes) "
          "would decide a smaller one",
    gates=("separation settled: at eps = 0.01, 0.1 and 1 of the longest runs, the seeds' "
           "mean |change of log S| over the last quarter of the run is below 0.05 (a run "
           "that collapsed or diverged has its censored value and is not read)",),
    note="The word is the Adam reading's (eta_P = 0.01). The SGD reading (eta_P = 1, the "
         "step the discrete analysis of D8 uses), decided by the same three tests on the same "
         "seeds and schedules (D9_SGD_READING), is shown beside with its own word, never the "
         "claim's. Every statistic is censored at the collapse rule's threshold: a run whose "
         "separation fell below 0.05 of its start (two prototypes met) or whose loss became "
         "non-finite enters at log(S_end / S_start) = log 0.05. Shown beside: eps = "
         "0.5 (one source's version), the fraction of failed runs per eps (diverged, two "
         "prototypes met, or one prototype taking every token), and the critical encoder "
         "step eps * eta_P of SGD sweeps at eta_P = 1 and 0.3.",
)
#: The other reading: plain SGD with the prototypes' step eta_P = 1, decided beside.
D9_SGD_READING = Rule(tests=_d9_tests("SGD, eta_P = 1"), n_seeds=D9_SEEDS,
                      scales=RULES["D9"].scales, power=RULES["D9"].power,
                      gates=RULES["D9"].gates)

# ------------------------------------------------------------------------------------- D11
# D11 (soft_vq): a soft VQ bottleneck uses the whole codebook from the first epoch, where the
# hard VQ-VAE starts at 18.8% (or 39%) and needs 44 epochs. The literal reading decides: the
# usage a training loop logs during epoch 1, both banks from the same uniform codebook.
#: "100% of the codebook" read as at least 61 of the 64 codes.
D11_FULL_USAGE = 0.95
#: Half the smaller gap the source reports at the start (100% against 39%).
D11_GAP_SESOI = 0.30
D11_SEEDS = 10
#: The other reading (the first edition's): the bank after epoch 1, on the test tokens, the
#: soft bank seeded from the data like VectorQuantize's. Decided beside the rule; its word is
#: shown, never the claim's.
D11_OTHER_READING = (
    Test("codebook usage of the test tokens after epoch 1, soft quantiser with its bank "
         "seeded from the first batch", ">", D11_FULL_USAGE, design="one-sample",
         method="one-sample t"),
    Test("codebook usage of the test tokens after epoch 1, soft (data start) - VectorQuantize "
         "(k-means start, expiry firing)", ">", 0.0, 0.05,
         "three of the 64 codes, the slack the usage margin allows", method="paired t"),
)
RULES["D11"] = Rule(
    tests=(
        Test("codebook usage of the training tokens during epoch 1, soft quantiser with its "
             "bank started at the hard VQ-VAE's uniform codebook", ">", D11_FULL_USAGE,
             design="one-sample", method="one-sample t"),
        Test("codebook usage of the training tokens during epoch 1, soft - hard VQ-VAE "
             "(straight-through), both from the same uniform codebook", ">", 0.0,
             D11_GAP_SESOI, "half the smaller gap the source reports at the start (100% "
             "against 39%: 0.61)", method="paired t"),
    ),
    n_seeds=D11_SEEDS,
    scales="training images (separate runs of 1,280, 2,560 and 5,120 images in the reference "
           "profile, each read after its first epoch)",
    power="a pilot at the reference settings on exploratory seeds 0 to 4 gave per-seed sds "
          "of 0.17 for test 1 (estimate 0.17, far short of the margin: 3 seeds) and 0.17 for "
          "test 2 (5 seeds to tell 0 from the SESOI); a run takes seconds, so the house "
          "minimum of 10",
    gates=("the soft quantiser reconstructs: the upper end of the 95% t interval of its test "
           "MSE over the mean predictor's after epoch 1 lies below 1",
           "the soft quantiser passes the reconstruction gradient to the encoder by plain "
           "autograd, where the hard one without its estimator passes none"),
    note="The literal reading is the per-epoch count a training loop logs, the count that the "
         "source's 18.8% and 39% for the hard VQ-VAE match. Both banks start from the same "
         "uniform codes, because a bank seeded from the data uses every code at its first "
         "batch, before any step. Each start of the soft quantiser takes its temperature "
         "(tau = r T_c, r below 1) from six values by the lowest validation MSE after epoch 1, "
         "as VectorQuantize takes its decay and threshold from six settings. The other "
         "reading, the bank after epoch 1 on test tokens (tests 3 and 4, the soft bank seeded "
         "from the data like VectorQuantize's), is decided beside: the claim's words name the "
         "first epoch's usage, not the codes unseen images get. Shown beside: tau / T_c at the "
         "start and the end, the gradient reaching unused codes, and the hard VQ-VAE over 50 "
         "epochs.",
    beside=D11_OTHER_READING,
)


# ------------------------------------------------------------------------------------- D12
# D12 (stacked_layers): two projection-free DDCL levels (tokens -> level-1 prototypes ->
# documents' mean soft centroids -> level-2 prototypes) trained jointly on 20 Newsgroups; the
# decomposition and V >= 0 at both levels, at every step of every run.
#: log10 of the bound on |L_q - L_OLS - V| / L_q.
D12_IDENTITY_LOG10 = -12.0
#: Residuals below this count as this: their digits are the rounding of the CPU's kernels
#: (under ATen's scalar kernels the per-seed spread of their log10 doubles).
D12_RESIDUAL_FLOOR = 1e-13
D12_IDENTITY_WHY = ("the claim is an identity and names its own size: any residual above "
                    "float64 rounding breaks it; 1e-12 is rounding (about 1e-16 per operation) "
                    "with room for means over up to 45,000 tokens, while a real break (a term "
                    "missing or weighted wrongly) shows at 1e-3 or more")
D12_SIGN_WHY = "the claim names its own bound, V >= 0"
D12_SEEDS = 10
RULES["D12"] = Rule(
    tests=(
        Test("log10 of the largest |L_q - L_OLS - V| / L_q of either level of a run (floored "
             "at 1e-13), over every training step, every full-data evaluation and the gap to "
             "an independent recomputation of the three terms", "<", margin=D12_IDENTITY_LOG10,
             why=D12_IDENTITY_WHY, design="one-sample", method="one-sample t"),
        Test("smallest V / L_q of either level of a run, over every training step and every "
             "full-data evaluation", ">", margin=0.0, why=D12_SIGN_WHY, design="one-sample",
             method="one-sample t"),
    ),
    n_seeds=D12_SEEDS,
    scales="training documents (a quarter, a half and all of an 800-message draw, separate "
           "runs of 12 epochs, each seed with its own subset)",
    power=("cpu pilot, 10 seeds at 200 documents: every run's largest residual lies under "
           "the 1e-13 floor (2.5e-14 at most; sd 0 of test 1, 2 seeds suffice), and test 2's "
           "V / L_q has sd 0.005 at 0.030 from its margin (3 seeds for 80% power); 2 seeds at "
           "800 documents agree (residuals under 1.2e-14; sd 0.002, 3 seeds); the house floor "
           "for runs of seconds, 10, is registered"),
    gates=(),
    note=("Each test's SESOI is its margin: the claim is exact. Test 2 reads V > 0: the layer "
          "computes V as a sum of non-negative terms, so the test fails only where a level's V "
          "vanishes (a bank collapsed to one point, or hard assignments), and its interval "
          "then sits at 0 (inconclusive). A run of any scale whose residual reaches 1e-12 or "
          "whose V falls below 0 at any step is a counterexample: the word is not reproduced "
          "whatever the intervals. A reproduced word is qualified when, in every run at the "
          "largest scale, some level has tau at or above the collapse threshold of the loss "
          "it trains (4 lambda_max of that level's inputs, at the start or at the end): V >= 0 "
          "then holds there only as the V = 0 of a bank free to collapse. No convergence gate: "
          "the claim is about every step, not an end point; the learning rate decays to zero "
          "on a cosine schedule. Shown beside: tau against T_c = 2 lambda_max of F and "
          "4 lambda_max of L_q per level and run, the separation of each bank, the groups of "
          "merged prototypes with the threshold of the tokens they dominate, and what each "
          "level captures."),
)


# ------------------------------------------------------------------------------- L6, L7, L8
# (laplacian_experiments): a small ViT on CIFAR-10 with 0, 1, 2 or 4 of its 4 heads per layer
# Laplacian; separate runs at 1,000, 3,000 and 9,000 training images, each read at its
# validation optimum and scored on the 10,000-image evaluation pool of unused training images.
L6_GAP_SESOI = 0.004
L6_GAP_WHY = ("0.4 points, half the paper's smaller gap (ImageNet, +0.87 points): a two-layer "
              "width-32 ViT trained on at most 9,000 images has less use for extra heads than "
              "the paper's ImageNet ViT, and a gain below 0.4 points would not make anyone "
              "change an architecture")
L6_SLOPE_SESOI = 0.001
L6_SLOPE_WHY = ("0.1 points per Laplacian head: the all - none SESOI spread evenly over the 4 "
                "heads of a layer (a linear rise that reaches 0.4 points with all heads)")
L6_SEEDS = 78
RULES["L6"] = Rule(
    tests=(
        Test("accuracy on the evaluation pool, all heads Laplacian - none (same seed)", ">",
             0.0, L6_GAP_SESOI, L6_GAP_WHY, design="paired",
             method="bootstrap over seeds and items"),
        Test("per-seed least-squares slope of accuracy on the evaluation pool against the "
             "number of Laplacian heads per layer (0, 1, 2, 4)", ">", 0.0, L6_SLOPE_SESOI,
             L6_SLOPE_WHY, design="one-sample", method="bootstrap over seeds and items"),
    ),
    n_seeds=L6_SEEDS,
    scales="training images (separate runs at 1,000, 3,000 and 9,000 images, each read at its "
           "validation optimum; 78 seeds at 9,000 images, 22 of them at the smaller counts)",
    power="the first confirmatory run (22 seeds, 1000-1021, at every image count), exploratory "
          "for this one, gave per-seed spreads at 9,000 images of 1.24 points (all - none; its "
          "5-seed pilot had 0.81) and 0.27 points per head (slope): 80% power to tell 0 from the "
          "SESOI needs 78 and 60 seeds; 78 run at 9,000 images, which detect 0.40 points and "
          "0.09 points per head by a t interval over seeds (the crossed bootstrap below is "
          "wider, by the pool's share). A seed there costs about a minute of one core for the "
          "four head settings, and the chapter's 75 minutes hold no more; the smaller counts, "
          "which give the trend, keep 22 seeds",
    gates=("every run at the largest image count stops past its validation-loss optimum "
           "(early stopping on a validation split carved from the training images, under a "
           "cosine schedule), not at the epoch cap",),
    note="The evaluation pool's 10,000 images are CIFAR-10 training images no run trains on. "
         "Every seed is scored on the same pool, so an image that favours one arm favours it "
         "for every seed, and the pool's sampling does not shrink with more seeds: the "
         "intervals resample seeds and pool images together (a crossed bootstrap of the "
         "per-image gap and slope, 9,999 resamples), and the standard error the pool adds to "
         "a seed's gap is shown beside the seed spread. The paper's +0.87 (ImageNet) and "
         "+1.92 (CIFAR-100) points are set beside. This is the rule's second confirmatory "
         "run, on seeds the first did not use (2000 onwards): the first said inconclusive at "
         "9,000 images, all - none +0.35 [-0.20, +0.89] points and slope +0.075 [-0.045, "
         "+0.195] points per head (t intervals over its 22 seeds, where its spreads asked for "
         "78 and 60); this run is sized on those spreads, and its intervals also cover the "
         "pool.",
)

L7_SESOI = 0.10
L7_WHY = ("a tenth of the quantity: the paper gives no size for these changes, and half its "
          "one quantified change of token geometry (k99 -21%, claim L8) is the smallest that "
          "would count as a visible change of geometry")
L7_SEEDS = 20
RULES["L7"] = Rule(
    tests=(
        Test("relative change of the within-sequence variance of the tokens after the final "
             "LayerNorm, all heads Laplacian / none - 1 (same seed)", "<", 0.0, -L7_SESOI,
             L7_WHY, design="paired", method="paired t"),
        Test("relative change of the between-class variance of the tokens after the final "
             "LayerNorm, all heads Laplacian / none - 1 (same seed)", ">", 0.0, L7_SESOI,
             L7_WHY, design="paired", method="paired t"),
        Test("relative change of NC1 of the training images in the terminal phase, all heads "
             "Laplacian / none - 1 (same seed)", "<", 0.0, -L7_SESOI, L7_WHY,
             design="paired", method="paired t"),
    ),
    n_seeds=L7_SEEDS,
    scales="training images for the variances (1,000, 3,000 and 9,000 images, separate runs "
           "read at their validation optimum); NC1 in runs fitted to a 1,000-image training "
           "set",
    power="5 exploratory seeds (0-4) at the reference settings gave per-seed spreads of 13% "
          "(within-sequence variance, 9,000 images), 8% (between-class variance) and 15% (NC1 "
          "in the terminal phase): 80% power to tell 0 from the SESOI needs 16, 7 and 20 "
          "seeds, so 20. The variances are read on the sweep's runs at 9,000 images, the 78 "
          "seeds of L6's second confirmatory run (22 at the smaller counts; the first, on "
          "seeds 1000-1021, said not reproduced for both, at +18.4 [+13.0, +23.7]% and -15.0 "
          "[-18.5, -11.5]%). NC1 re-reads the terminal runs of the first confirmatory run "
          "(20 seeds, 1000-1019), which said not reproduced (+38.7 [+27.3, +50.1]%); as one "
          "test not reproduced decides the claim, the new variance seeds cannot change L7's "
          "word",
    gates=("every run at the largest image count stops past its validation-loss optimum, not "
           "at the epoch cap",
           "every terminal-phase run fits its training images to at least 99% accuracy"),
    note="Variances are absolute (traces per token, on the evaluation pool): the tokens after "
         "the final LayerNorm are those whose mean the classifier reads. The residual stream "
         "after every block, and the variances as shares of the total, are shown beside, with "
         "NC1 of the evaluation pool and the terminal runs' distance from a simplex ETF.",
)

L8_SESOI = -0.105
L8_WHY = ("half the paper's -21% (547.7 -> 430.4): a small ViT on CIFAR-10 may show a weaker "
          "effect than the paper's model, but a change under half the paper's is not the "
          "claimed faster decay")
L8_SEEDS = 16
RULES["L8"] = Rule(
    tests=(
        Test("relative change of k99 of the tokens after the final LayerNorm, all heads "
             "Laplacian / none - 1 (same seed)", "<", 0.0, L8_SESOI, L8_WHY,
             design="paired", method="paired t"),
    ),
    n_seeds=L8_SEEDS,
    scales="model width (32, 64 and 128, separate runs on 3,000 training images, each read at "
           "its validation optimum); decided at width 128, where one component is about 2% of "
           "k99",
    power="the first confirmatory run (10 seeds, 1000-1009, width 128), exploratory for this "
          "one, gave a per-seed spread of 13.4% (its 5-seed pilot had 7.3%): 80% power to tell "
          "0 from the SESOI needs 15 seeds; 16 run, which detect a change of 10.1%",
    gates=("every width-128 run stops past its validation-loss optimum, not at the epoch cap",),
    note="k99 is the number of principal components holding 99% of the variance of the "
         "evaluation pool's tokens. The participation ratio, which moves continuously with the "
         "spectrum, and k99 of the residual stream before the final LayerNorm are shown "
         "beside. This is the rule's second confirmatory run, on seeds the first did not use: "
         "the first (10 seeds at width 128) said reproduced at -11.0% [-20.6, -1.4], an upper "
         "end so near 0 that one seed fewer could have moved it across, with twice the "
         "pilot's spread; this run is sized on that spread and adds width 64. The paper "
         "reports its -21% for its GPT-2-style language model; the book measures the same "
         "statistic on its ViT.",
)


# ------------------------------------------------------------------------------------- L9
# L9 (laplacian_lm): a character GPT on Tiny Shakespeare (width 64, 2 layers, 8 heads) with 5
# heads per layer Laplacian against none; separate runs of 250, 500 and 1,000 steps (warm-up
# and cosine decay), each read at its lowest loss on a validation split carved from the
# training text and scored on the held-out last 10% of the text.
L9_LOSS_SESOI = -0.01
L9_LOSS_WHY = ("0.01 nats per character (0.014 bits): the paper reports downstream accuracies "
               "and no loss, so there is no gap to take a share of; published character-level "
               "language models differ by about 0.01-0.02 bits per character, and a smaller "
               "gain would not make anyone change an architecture")
L9_CDNV_SESOI = -0.10
L9_CDNV_WHY = ("a tenth of the CDNV: the paper gives no size for the separability of "
               "same-next-token representations, and half its one quantified change of token "
               "geometry (k99 -21%, claim L8) is the smallest that would count as a visible "
               "change; L7's smallest effect for the same kind of change")
#: The most the mean paired validation-loss gap of the deciding runs may still move over the
#: last tenth of their schedule (nats per character): half the loss SESOI.
L9_SETTLE = 0.005
L9_SEEDS = 20
RULES["L9"] = Rule(
    tests=(
        Test("loss on the held-out text (nats per character) at the validation optimum, 5 "
             "Laplacian heads per layer - none (same seed)", "<", 0.0, L9_LOSS_SESOI,
             L9_LOSS_WHY, design="paired", method="paired t"),
        Test("relative change of the CDNV of the held-out tokens after the final LayerNorm, "
             "grouped by the next character, at the validation optimum, 5 Laplacian heads / "
             "none - 1 (same seed)", "<", 0.0, L9_CDNV_SESOI, L9_CDNV_WHY, design="paired",
             method="paired t"),
    ),
    beside=(
        Test("relative change of that CDNV at a matched validation loss (the lowest both arms "
             "of a seed reach, read along each run's curve), 5 Laplacian heads / none - 1 "
             "(same seed)", "<", 0.0, L9_CDNV_SESOI, L9_CDNV_WHY, design="paired",
             method="paired t"),
    ),
    n_seeds=L9_SEEDS,
    scales="training steps (separate runs of 250, 500 and 1,000 steps, each with its own "
           "warm-up and cosine decay, read at its validation optimum)",
    power="4 exploratory seeds (0-3) at the reference settings (1,000 steps) gave per-seed "
          "spreads of 0.0098 nats per character (loss gap) and 0.7% (CDNV change): 80% power "
          "to tell 0 from the SESOI needs 10 and 2 seeds; 20 keep that power for a loss-gap "
          "spread up to 0.015, half again the pilot's (a spread from 4 seeds is itself "
          "uncertain), at about half an hour of one core",
    gates=(f"the runs of the longest schedule are read at their lowest validation loss, and the "
           f"comparison has settled there: over the last tenth of the schedule the mean paired "
           f"validation-loss gap (Laplacian - none) moved by less than {L9_SETTLE:g} nats per "
           f"character (half the loss SESOI)",),
    note="The paper's downstream average (reasoning and code benchmarks after pre-training a "
         "561M-parameter model) has no counterpart at this scale: the held-out loss is the "
         "language-modelling quality it stands on. A model with a lower loss also tends to "
         "have a lower CDNV, so the CDNV is also compared at a matched validation loss, "
         "beside the rule. The standard error that sampling the held-out windows adds to a "
         "seed's loss gap is shown beside the seed spread.",
)


# ------------------------------------------------------------------------------------ L10
# L10 (dense_features): a small ViT self-distilled by DINO + iBOT on a dense proxy (digits
# pasted on CIFAR-10, exact pixel labels), all heads Laplacian against none, each at its own
# tuned rate, read by linear probes on the frozen teacher; separate runs of 200, 400 and 800
# steps.
L10_ACC_SESOI = 0.01
L10_ACC_WHY = ("one point of accuracy: the size of the Laplacian paper's own ViT gains "
               "(+0.87 points on ImageNet, +1.92 on CIFAR-100); a smaller gain of a linear "
               "probe would not make anyone change an architecture")
L10_MIOU_SESOI = 0.0123
L10_MIOU_WHY = ("half the paper's ADE20K gain (32.27 - 29.81 = 2.46 mIoU points): a ViT of "
                "width 32 pre-trained on a thousand images may show a weaker effect than "
                "ViT-S/16 on ImageNet, but less than half the paper's gain is not the claimed "
                "better segmentation")
#: The largest mean move over the seeds of the paired validation foreground mIoU gap over the
#: last quarter of the deciding schedule (the settling gate): half the SESOI, as L9's.
L10_SETTLED = L10_MIOU_SESOI / 2
L10_SEEDS = 26
RULES["L10"] = Rule(
    tests=(
        Test("test accuracy of the image-level linear probe on the teacher's [CLS] token "
             "(the CIFAR-10 class of the background), all heads Laplacian - none (same seed)",
             ">", 0.0, L10_ACC_SESOI, L10_ACC_WHY, design="paired", method="paired t"),
        Test("test foreground mIoU of the linear 1x1 probe on the teacher's patch tokens "
             "(digit tile or background), all heads Laplacian - none (same seed)", ">", 0.0,
             L10_MIOU_SESOI, L10_MIOU_WHY, design="paired", method="paired t"),
    ),
    beside=(
        Test("test mIoU of the 11-class linear 1x1 probe on the teacher's patch tokens, all "
             "heads Laplacian - none (same seed)", ">", 0.0, L10_MIOU_SESOI, L10_MIOU_WHY,
             design="paired", method="paired t"),
    ),
    n_seeds=L10_SEEDS,
    scales="pre-training steps (separate runs of 200, 400 and 800 steps, each with its own "
           "warm-up and cosine decay, on 1,024 training images; the shorter lengths on the "
           "first 8 seeds, every length compared on those same seeds)",
    power="the first confirmatory run (seeds 1000-1006, one shared rate, 512 test images a "
          "seed), exploratory for this rule, gave a per-seed sd of the image-probe gap of "
          "0.025 (95% interval 0.016 to 0.055 from 7 seeds): 52 seeds for 80% power at the "
          "SESOI. Most of it was the sampling of the test images: on two exploratory seeds "
          "(950, 951) at the exploratory best rates, with 4,096 test images each, the arms "
          "disagreed on 19.5% of the images, a per-image variance of the paired difference of "
          "0.195, so 512 test images add an sd of 0.0195 and leave 0.0156 to the seeds' own "
          "spread. With 4,096 test images a seed the sd is about 0.0171: 25 seeds give 80% "
          "power at the SESOI, and the rule's 26 give 82% (detectable 0.0098). If the first "
          "run's sd was 0.03 rather than 0.025, 26 seeds give 54%. The foreground gap (sd "
          "0.034 in the first run) was +0.06 and +0.07 on the exploratory seeds at tuned "
          "rates, far beyond its SESOI; 26 seeds detect 0.020 at the first run's sd. Cost: "
          "about 125 CPU minutes over two workers, tuning included",
    gates=("no deciding run collapsed: the teacher's [CLS] output neither near uniform "
           "(per-image entropy above 95% of log K) nor one-hot for all images (entropy of "
           "the batch mean below 0.5 nats), its patch features of effective rank at least 2 "
           "(read on validation images)",
           f"the foreground comparison settled: over the last quarter of the deciding schedule "
           f"the paired validation foreground mIoU gap (all heads Laplacian - none; validation "
           f"images carved from the training split) moved by at most {L10_SETTLED:g} on "
           f"average over the seeds (half the SESOI, as for L9), or by a move that, added once "
           f"more to test 2's interval, leaves its word as it is (a gap still growing away "
           f"from both boundaries cannot change the word)",
           "in each head setting the trained teacher beats the same untrained ViT on the "
           "foreground probe (paired 95% t interval over the seeds above 0)"),
    note="Each arm pre-trains at its own rate, tuned before the deciding runs: on the grid "
         "2.5e-4 to 8e-3 (factors of 2), one 800-step run per rate on each of the tuning seeds "
         "900 and 901, scored on their 2,048 validation images only; the rate of the best mean "
         "rank over the two binding tests' validation scores (image probe accuracy and "
         "foreground mIoU; ties to the larger sum, then to the smaller rate). Exploratory "
         "runs had found that one shared rate (2e-3) suited the Laplacian arm and not the "
         "other. Each seed draws its own training, validation and test images (4,096 test "
         "images on backgrounds from the 40,000 CIFAR-10 training images outside the subset, "
         "never trained on), so the spread over seeds holds the sampling of the test images "
         "and the paired t interval covers it. "
         "The 11-class probe is decided beside: on these small tiles even a ViT trained with "
         "the labels barely leaves the all-background labelling, so it cannot carry the "
         "word. The all-background labelling, the raw patches, the untrained ViT and the same "
         "ViT trained with the segmentation labels are the floors and the ceiling.",
)


# L10 on the papers' model and probe data (paper profile; dense_features, dino_study): a
# ViT-S/16 self-distilled by DINO + iBOT on Imagenette, all heads Laplacian against none, each
# at its own tuned rate, read by linear probes on Imagenette and ADE20K; separate runs of 25,
# 50 and 100 epochs. Registered before any run at this scale.
L10_PAPER_SEEDS = 26
L10_PAPER_REL_SESOI = 0.041
L10_PAPER_MIOU_WHY = ("half the paper's relative ADE20K gain (32.27 / 29.81 - 1 = 8.3%): our "
                      "probe reads ADE20K at 160 px after pre-training on Imagenette, so its "
                      "baseline lies below the paper's 29.81 mIoU, and a relative gain carries "
                      "the paper's effect to that baseline; less than half of it is not the "
                      "claimed better segmentation")
#: The settling allowance of the relative mIoU gap: half its SESOI, as for the proxy.
L10_PAPER_SETTLED = L10_PAPER_REL_SESOI / 2
PAPER_RULES["L10"] = Rule(
    tests=(
        Test("Imagenette validation accuracy of a linear probe on the teacher's [CLS] token "
             "(10 classes; fitted on the training images less 1,000 held out), all heads "
             "Laplacian - none (same seed)", ">", 0.0, L10_ACC_SESOI, L10_ACC_WHY,
             design="paired", method="bootstrap over seeds and items"),
        Test("ADE20K validation mIoU of a linear probe on the teacher's patch tokens (150 "
             "classes; fitted on the training images less 2,000 held out), all heads "
             "Laplacian / none - 1 (same seed)", ">", 0.0, L10_PAPER_REL_SESOI,
             L10_PAPER_MIOU_WHY, design="paired", method="bootstrap over seeds and items"),
    ),
    n_seeds=L10_PAPER_SEEDS,
    scales="pre-training epochs (separate runs of 25, 50 and 100 epochs of Imagenette, each "
           "with its own warm-up and cosine decay; the shorter lengths on the first 4 seeds)",
    power="no run at this scale precedes the rule: the proxy rule's 26 seeds are carried "
          "over, and each test reports the seeds its observed spread would need, so a run "
          "short of power says so",
    gates=("no deciding run collapsed: the teacher's [CLS] output neither near uniform "
           "(per-image entropy above 95% of log K) nor one-hot for all images (entropy of "
           "the batch mean below 0.5 nats) on held-out Imagenette training images, the raw "
           "patch features of held-out ADE20K training images of effective rank at least 2",
           f"the dense comparison settled: over the last quarter of the deciding schedule "
           f"the paired relative ADE20K mIoU gap on the 2,000 held-out training images moved "
           f"by at most {L10_PAPER_SETTLED:g} on average over the seeds (half the SESOI), or "
           f"by a move that, added once more to test 2's interval, leaves its word as it is",
           "in each head setting the trained teacher beats the same untrained ViT on the "
           "ADE20K probe (paired 95% t interval over the seeds above 0)"),
    note="Each arm pre-trains at its own rate, tuned before the deciding runs: 2.5e-4, 5e-4 "
         "(DINO's published rate) and 1e-3 per 256 images, one 100-epoch run per rate on "
         "tuning seed 900, scored on the held-out training images only; the rate of the best "
         "mean rank of the two scores (ties to the larger sum, then to the smaller rate). "
         "Every seed is scored on the same benchmark validation splits (Imagenette's 3,925 "
         "images, ADE20K's 2,000), so each interval resamples the images as well as the "
         "seeds (a crossed bootstrap; for mIoU, of each image's per-class intersections and "
         "unions), and the evidence gives the part of each interval that resampling the "
         "images alone makes, which no number of seeds can shrink. The recipe is DINO + "
         "iBOT on Imagenette's 9,469 images at 160 px with two "
         "global views (not ImageNet, not multi-crop). ADE20K pixel accuracy, the untrained "
         "ViT and the majority-class labelling are shown beside.",
)


# ------------------------------------------------------------------------------------- X2
# X2 (laplacian_readout, ours): a DDCL readout on the small ViT with every head Laplacian
# against the same readout on the ViT without; separate runs at 1,000, 3,000 and 9,000
# training images, each read at its validation optimum and scored on the 10,000-image
# evaluation pool of unused training images. The word is the accuracy test's; the premise
# (smoothing of the tokens), usage and separation are decided beside.
X2_ACCURACY_SESOI = L6_GAP_SESOI
X2_ACCURACY_WHY = ("0.4 points, L6's SESOI for the same encoder on the same evaluation pool: half "
                   "the Laplacian paper's smaller ViT gain (ImageNet, +0.87 points); a gain of "
                   "the readout below it would not make anyone pair the two layers")
X2_VARIANCE_SESOI = 0.10
X2_VARIANCE_WHY = ("a tenth of the variance: L7's smallest effect for the same quantity, half "
                   "the paper's one quantified change of token geometry (k99 -21%)")
X2_USAGE_SESOI = 1 / 16
X2_USAGE_WHY = "one prototype of a head's 16"
X2_SEEDS = 43
#: The per-seed sd of the accuracy gap at 9,000 images in X2's first confirmatory run (seeds
#: 1000-1042, committed in 709bf02), from which the rule's power text sizes its seeds: the 43
#: seeds "detect 0.74 points" by a t interval over seeds alone.
X2_PLANNING_SPREAD = 0.016819
RULES["X2"] = Rule(
    tests=(
        Test("accuracy of the DDCL readout on the evaluation pool, encoder with all heads "
             "Laplacian - none (same seed)", ">", 0.0, X2_ACCURACY_SESOI, X2_ACCURACY_WHY,
             design="paired", method="bootstrap over seeds and items"),
    ),
    beside=(
        Test("relative change of the absolute within-sequence variance of the encoder's tokens "
             "after its final LayerNorm (what the readout reads), all heads Laplacian / none "
             "- 1 (same seed)", "<", 0.0, -X2_VARIANCE_SESOI, X2_VARIANCE_WHY,
             design="paired", method="paired t"),
        Test("relative change of the absolute within-sequence variance of the residual stream "
             "before the final LayerNorm, all heads Laplacian / none - 1 (same seed)", "<", 0.0,
             -X2_VARIANCE_SESOI, X2_VARIANCE_WHY, design="paired", method="paired t"),
        Test("fraction of the readout's prototypes used on the evaluation pool, all heads "
             "Laplacian - none (same seed)", ">", 0.0, X2_USAGE_SESOI, X2_USAGE_WHY,
             design="paired", method="paired t"),
        Test("relative change of the smallest distance between the readout's prototypes in "
             "units of the spread of the tokens they see, all heads Laplacian / none - 1 "
             "(same seed)", ">", 0.0, X2_VARIANCE_SESOI, X2_VARIANCE_WHY, design="paired",
             method="paired t"),
    ),
    n_seeds=X2_SEEDS,
    scales="training images (separate runs at 1,000, 3,000 and 9,000 images, each read at its "
           "validation optimum)",
    power="the first confirmatory run (43 seeds, 1000-1042, under a 1-point SESOI and a t "
          "interval over seeds), exploratory for this rule, at 9,000 images: per-seed sd 0.0168 "
          "of the accuracy gap, so 141 seeds tell 0 from the SESOI with 80% power; 0.080 and "
          "0.18 of the premise after and before the final LayerNorm (8 and 29 seeds), 0.10 of "
          "usage (23) and 0.22 of separation (41). The chapter's budget (about 55 minutes of "
          "one core, 77 s a seed over the three image counts) caps the seeds at 43, which detect "
          "0.74 points with 80% power; about 141 seeds, some three hours of one core, would "
          "decide a gain as small as the SESOI",
    gates=("every run at the largest image count stops past its validation-loss optimum "
           "(early stopping on a validation split carved from the training images, under a "
           "cosine schedule), not at the epoch cap",),
    note="The premise (test 2: the within-sequence variance of the tokens the readout reads) "
         "says how the word is read, not whether it is given: where the Laplacian heads lower "
         "it, the word says whether smoothing helped the prototypes; where they do not, it "
         "says whether Laplacian heads help a DDCL readout, and smoothing is not what made "
         "the difference. The evaluation pool's images are CIFAR-10 training images no run "
         "trains on. Every seed is scored on the same pool, so the accuracy interval resamples "
         "seeds and pool images together (each drawn image counts for every drawn seed): it "
         "covers the sampling of the pool, which more seeds do not average away. Amended "
         "after the first confirmatory run (which said not reproduced under a 1-point SESOI "
         "and a t interval over seeds only): the SESOI is L6's for the same encoder and pool, "
         "and the interval covers the pool.",
)


def digest(claim_id: str) -> str | None:
    """16 hex digits of the sha256 of the registered rule of ``claim_id`` (its full
    dataclass ``repr``: tests, margins, SESOIs, seeds, gates), with its paper-scale rule where
    it has one (:data:`PAPER_RULES`); None when it has none."""
    rule = RULES.get(claim_id)
    if rule is None:
        return None
    text = repr(rule) if claim_id not in PAPER_RULES else repr((rule, PAPER_RULES[claim_id]))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
