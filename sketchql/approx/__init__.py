"""sketchql.approx"""
