"""The PySpark seed job: extract → pure transform → load into the due-jobs store.

Run it as ``recur seed ...`` (a local Spark session) or as
``spark-submit spark/seed_job.py ...`` (any master). Importing this package
does not import pyspark; its modules do, so workers never need the extra.
"""
