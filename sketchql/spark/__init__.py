"""sketchql.spark"""
