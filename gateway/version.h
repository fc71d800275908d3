/* The release this build is. */
#ifndef SL_VERSION_H
#define SL_VERSION_H

#define SLUICE_VERSION "0.1.0"

#endif
