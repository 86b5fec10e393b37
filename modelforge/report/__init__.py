"""What a run shows: the console's lines (``report/console.py``), its progress (``report/progress.py``), the
phases its time went to (:mod:`.timings`), the table it prints at its end (:mod:`.metrics_table`), and the pictures
it leaves (:mod:`.learning_curves` after ``train``, :mod:`.confusion_matrix` after ``eval``).

Below ``modelforge.train``, which calls it: nothing here imports the training loop; what it needs of a run (its
rank, how its fit counts epochs) is passed in. Importing this package imports none of its modules.
"""
