"""sketchql.data"""
