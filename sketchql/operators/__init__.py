"""sketchql.operators"""
