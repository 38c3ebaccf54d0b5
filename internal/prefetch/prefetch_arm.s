#include "textflag.h"

// func lines(p *uintptr, n int)
TEXT ·lines(SB), NOSPLIT|NOFRAME, $0-8
	MOVW	p+0(FP), R0
	MOVW	n+4(FP), R1
	CMP	$0, R1
	BLE	done
loop:
	MOVW.P	4(R0), R2
	PLD	(R2)
	SUB.S	$1, R1, R1
	BNE	loop
done:
	RET
