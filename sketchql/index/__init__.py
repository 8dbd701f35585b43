"""sketchql.index"""
